/// The shapes of the ids that arrive from outside, checked before any lookup, so nothing an unauthenticated client
/// sends can become an unbounded cache entry, Redis key or stored value.
public enum IdentifierShape {
    /// Trello's ids are 24 hexadecimal characters; we accept 1 to 64 ASCII letters, digits, `-` and `_`, which bounds
    /// every key built from one and keeps NUL, control characters, spaces and `:` out, without tying us to today's format.
    /// (Inlinable, as the other shape checks: they run on every request, and unspecialised generic code across modules
    /// cost the ingress more than the check itself.)
    @inlinable
    public static func isTrelloID(_ text: some StringProtocol) -> Bool {
        let utf8 = text.utf8
        guard (1...64).contains(utf8.count) else { return false }
        return utf8.allSatisfy { byte in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
    }

    /// Our account ids: a lower-case UUID (8-4-4-4-12 hexadecimal digits).
    @inlinable
    public static func isAccountID(_ text: some StringProtocol) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == 36 else { return false }
        var index = 0
        for byte in utf8 {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard isLowerHex(byte) else { return false }
            }
            index += 1
        }
        return true
    }

    @inlinable
    public static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}
