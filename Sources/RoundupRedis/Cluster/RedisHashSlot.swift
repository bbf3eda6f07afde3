import NIOCore

/// Which of Redis Cluster's 16,384 slots a key lives in: CRC16 (XMODEM) of the key, or of its hash tag — the bytes
/// between the first `{` and the next `}`, when there are any — modulo 16,384. Keys that share a tag share a slot, so a
/// script or a multi-key command may touch them together.
public struct RedisHashSlot: Sendable, Hashable, Comparable, CustomStringConvertible {
    public static let count = 16_384

    public let value: Int

    public init(_ value: Int) {
        precondition((0..<Self.count).contains(value), "a hash slot is in 0..<16384")
        self.value = value
    }

    public init(key: some Collection<UInt8>) {
        self.value = Int(Self.crc16(Self.hashed(key)) & 0x3FFF)
    }

    public init(key: String) {
        self.init(key: key.utf8)
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.value < rhs.value }

    /// Whether keys built as `prefix + key` keep the hash tags written in `key`: a prefix holding a brace could open or
    /// close a tag of its own and move every key to another slot.
    public static func keepsHashTags(underPrefix prefix: String) -> Bool { !prefix.contains("{") && !prefix.contains("}") }
    public var description: String { String(value) }

    /// The part of a key that is hashed: its tag if it has a non-empty one, else the whole key.
    static func hashed<Key: Collection<UInt8>>(_ key: Key) -> Key.SubSequence {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")) else { return key[...] }
        let start = key.index(after: open)
        guard let close = key[start...].firstIndex(of: UInt8(ascii: "}")), close != start else { return key[...] }
        return key[start..<close]
    }

    /// CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0), the function Redis Cluster uses.
    static func crc16(_ bytes: some Sequence<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
        }
        return crc
    }

    private static let table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }
}

extension RedisArgument {
    /// The slot of the key this argument holds.
    var hashSlot: RedisHashSlot {
        switch storage {
        case .string(let string): RedisHashSlot(key: string.utf8)
        case .bytes(let bytes): RedisHashSlot(key: bytes)
        case .buffer(let buffer): RedisHashSlot(key: buffer.readableBytesView)
        }
    }

    /// The argument as text, when it is short and is text (a command's name or sub-command).
    var word: String? {
        switch storage {
        case .string(let string): string
        case .bytes(let bytes) where bytes.count <= 32: String(decoding: bytes, as: UTF8.self)
        case .buffer(let buffer) where buffer.readableBytes <= 32: String(buffer: buffer)
        default: nil
        }
    }
}
