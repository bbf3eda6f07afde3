import Crypto

/// Lowercase hexadecimal, written straight into a string: one table and one loop for every hex the server writes on
/// a hot path (stored field hashes, dedupe keys, JSON's `\u00xx` escapes).
public enum Hex {
    static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    public static func lowercase(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            for (index, byte) in bytes.enumerated() {
                out[2 * index] = digits[Int(byte >> 4)]
                out[2 * index + 1] = digits[Int(byte & 0x0F)]
            }
            return bytes.count * 2
        }
    }

    /// The first 128 bits of the SHA-256 of `text` in hex (32 characters): a key of one size for a value of any size.
    public static func sha256Prefix128(_ text: String) -> String {
        SHA256.hash(data: Array(text.utf8)).withUnsafeBytes { lowercase(UnsafeRawBufferPointer(rebasing: $0[0..<16])) }
    }
}
