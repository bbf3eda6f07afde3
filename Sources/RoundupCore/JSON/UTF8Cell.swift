/// Text a store lends as its UTF-8 bytes for the time of one call (a column of the row it is reading), so that a
/// response can be written from it without making a `String` first (making and freeing the nine strings of each
/// change was a third of a changes page's instructions).
///
/// The bytes need not be valid UTF-8 — SQLite keeps whatever bytes it is given — so every reader checks
/// (`isValidUTF8`) and repairs what is not, as `String(decoding:as:)` does: each invalid sequence becomes U+FFFD. A
/// response written from cells is valid UTF-8 whatever the store holds, as it was when it was written from `String`s.
public struct UTF8Cell {
    public let bytes: UnsafeBufferPointer<UInt8>

    /// `bytes` must stay valid, and unchanged, for as long as the cell is used.
    public init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    public var count: Int { bytes.count }

    /// The text as a `String`, repaired where it is not valid UTF-8.
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    /// Whether the bytes are valid UTF-8: ASCII is checked a word at a time (`isASCII`), anything else by the standard
    /// library's validator (`UTF8Span`), neither of which copies the bytes.
    public var isValidUTF8: Bool {
        guard let base = bytes.baseAddress, !Self.isASCII(base, count: bytes.count) else { return true }
        return validatesBeyondASCII
    }

    /// The standard library's validation alone, for a caller that already knows a byte is above 0x7F.
    var validatesBeyondASCII: Bool { (try? UTF8Span(validating: bytes.span)) != nil }

    /// Whether every one of `count` bytes at `base` is below 0x80: 32 bytes a step, then 8, and the rest in one word
    /// that overlaps the last one checked (byte by byte only below 8 bytes in all).
    @inline(__always)
    static func isASCII(_ base: UnsafePointer<UInt8>, count: Int) -> Bool {
        let raw = UnsafeRawPointer(base)
        func word(_ offset: Int) -> UInt64 { raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self) }
        var high: UInt64 = 0
        var index = 0
        while index + 32 <= count {
            high |= word(index) | word(index + 8) | word(index + 16) | word(index + 24)
            index += 32
        }
        while index + 8 <= count {
            high |= word(index)
            index += 8
        }
        if index < count {
            if count >= 8 {
                high |= word(count - 8)
            } else {
                for at in index..<count { high |= UInt64(base[at]) }
            }
        }
        return high & 0x8080_8080_8080_8080 == 0
    }

    /// Whether the bytes are those of `text`.
    public func equals(_ text: StaticString) -> Bool {
        guard text.utf8CodeUnitCount == bytes.count else { return false }
        for index in 0..<bytes.count where bytes[index] != text.utf8Start[index] { return false }
        return true
    }
}
