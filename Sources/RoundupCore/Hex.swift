import Crypto
public import Foundation

/// Lowercase hexadecimal, written straight into a string: one table and one loop for every hex the server writes
/// (token and field hashes, dedupe keys, ids, JSON's `\u00xx` escapes).
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

    /// A UUID as `uuidString.lowercased()` writes it (8-4-4-4-12 digits), without Foundation's formatting through
    /// `sprintf` and a second string for the lower case (a request id for every API request, an `apns-id` for
    /// every push).
    public static func lowercase(_ uuid: UUID) -> String {
        withUnsafeBytes(of: uuid.uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { out in
                var at = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        out[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    out[at] = digits[Int(byte >> 4)]
                    out[at + 1] = digits[Int(byte & 0x0F)]
                    at += 2
                }
                return at
            }
        }
    }

    /// The first 128 bits of the SHA-256 of `text` in hex (32 characters): a key of one size for a value of any size.
    public static func sha256Prefix128(_ text: String) -> String {
        SHA256.hash(data: Array(text.utf8)).withUnsafeBytes { lowercase(UnsafeRawBufferPointer(rebasing: $0[0..<16])) }
    }
}
