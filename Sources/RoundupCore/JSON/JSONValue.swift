import Foundation
public import NIOCore

/// Any JSON value. Used for card fields, whose shapes vary (strings, dates, arrays, objects).
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let b = try? container.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? container.decode(Double.self) {
            self = .number(n)
        } else if let s = try? container.decode(String.self) {
            self = .string(s)
        } else if let a = try? container.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .number(let n): try container.encode(n)
        case .string(let s): try container.encode(s)
        case .array(let a): try container.encode(a)
        case .object(let o): try container.encode(o)
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// A canonical text form (sorted keys, no spaces), so equal values always hash alike.
    public var canonicalJSON: String {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        writeCanonical(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private func writeCanonical(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): Self.writeCanonical(number: n, into: &out)
        case .string(let s): Self.writeCanonical(string: s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.writeCanonical(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (i, key) in o.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeCanonical(string: key, into: &out)
                out.append(UInt8(ascii: ":"))
                o[key]!.writeCanonical(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// A number as `canonicalJSON` writes it: integral values below 10^15 without a fraction, others as Swift's
    /// shortest round-trip form. For writers of one fixed shape that do not build a `JSONValue` (`FieldStamps`).
    /// JSON has no infinity or NaN: such a number (read from `1e400`) is written as `null`, never as text no parser
    /// reads back. The API refuses such numbers where it reads a body; this is the last guard for other paths.
    public static func writeCanonical(number n: Double, into out: inout [UInt8]) {
        guard n.isFinite else { return out.append(contentsOf: "null".utf8) }
        if n.rounded() == n, abs(n) < 1e15 { return writeDecimal(Int64(n), fractionDigits: 0, into: &out) }
        // A number of whole milliseconds (a time from Trello's dates, as every field stamp holds one) is written as that
        // decimal without the shortest-form formatter: it is the shortest form, since it reads back as the same number
        // and numbers of this size lie less than a millisecond apart, so no shorter decimal does.
        if abs(n) >= 1, abs(n) < 1e12 {
            let milliseconds = (n * 1000).rounded()
            if milliseconds / 1000 == n { return writeDecimal(Int64(milliseconds), fractionDigits: 3, into: &out) }
        }
        out.append(contentsOf: String(n).utf8)
    }

    /// `value` / 10^`fractionDigits` in decimal, the fraction's trailing zeros left out.
    private static func writeDecimal(_ value: Int64, fractionDigits: Int, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var fraction: UInt64 = 0
        var fractionScale: UInt64 = 1
        for _ in 0..<fractionDigits { fractionScale *= 10 }
        (magnitude, fraction) = magnitude.quotientAndRemainder(dividingBy: fractionScale)
        writeDigits(magnitude, into: &out)
        guard fraction > 0 else { return }
        out.append(UInt8(ascii: "."))
        var digits = fractionDigits
        while fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        var divisor: UInt64 = 1
        for _ in 1..<digits { divisor *= 10 }
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(fraction / divisor % 10))
            divisor /= 10
        }
    }

    private static func writeDigits(_ value: UInt64, into out: inout [UInt8]) {
        var divisor: UInt64 = 1
        while divisor <= value / 10 { divisor *= 10 }
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        } while divisor > 0
    }

    /// A string literal as `canonicalJSON` writes it, quotes included.
    public static func writeCanonical(string s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        JSONStringEscaping.pieces(of: s) { out.append(contentsOf: $0) }
        out.append(UInt8(ascii: "\""))
    }

    /// SHA-256 of the canonical form, hex, truncated to 128 bits: what `sync_tasks` stores per field.
    public var fieldHash: String {
        Hex.sha256Prefix128(canonicalJSON)
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

/// How a string is written as a JSON string literal: only what JSON requires is escaped (quote, backslash, control
/// characters, `\n` `\r` `\t` by name and the others as `\u00xx`); other UTF-8 passes through. One copy of the rule for
/// every writer: `JSONValue.canonicalJSON` (and `writeCanonical(string:)`), `ByteBuffer.writeJSONString` and
/// `JSONByteWriter.writeJSONString`.
enum JSONStringEscaping {
    static let hexDigits = Hex.digits

    /// Calls `write` with the literal's body (without its quotes) piece by piece: runs of bytes that need no escape as
    /// they are, in one piece each, and each escape sequence.
    @inline(__always)
    static func pieces(of text: String, _ write: (UnsafeRawBufferPointer) -> Void) {
        var text = text
        text.withUTF8 { _ = pieces(ofUTF8: $0, write) }
    }

    /// The same for text given as its UTF-8 bytes (`UTF8Cell`); returns whether every byte was ASCII (below 0x80), so
    /// a caller that must check the bytes for UTF-8 needs to only when they were not.
    @inline(__always) @discardableResult
    static func pieces(ofUTF8 bytes: UnsafeBufferPointer<UInt8>, _ write: (UnsafeRawBufferPointer) -> Void) -> Bool {
        var runStart = 0
        var index = 0
        var high: UInt64 = 0
        while index < bytes.count {
            // Eight bytes at a time while none needs an escape (most text has none); a word that has one, byte by byte.
            if index + 8 <= bytes.count {
                let word = UnsafeRawPointer(bytes.baseAddress! + index).loadUnaligned(as: UInt64.self)
                high |= word
                if !needsEscape(word) {
                    index += 8
                    continue
                }
            }
            for at in index..<min(index + 8, bytes.count) {
                let byte = bytes[at]
                high |= UInt64(byte)
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if runStart < at { write(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[runStart..<at]))) }
                runStart = at + 1
                var escape: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (UInt8(ascii: "\\"), byte, 0, 0, 0, 0)
                var length = 2
                switch byte {
                case 0x0A: escape.1 = UInt8(ascii: "n")
                case 0x0D: escape.1 = UInt8(ascii: "r")
                case 0x09: escape.1 = UInt8(ascii: "t")
                case 0..<0x20:
                    escape = (
                        UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hexDigits[Int(byte >> 4)],
                        hexDigits[Int(byte & 0x0F)]
                    )
                    length = 6
                default: break  // quote and backslash: a backslash before the byte itself
                }
                withUnsafeBytes(of: &escape) { write(UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
            }
            index = min(index + 8, bytes.count)
        }
        if runStart < bytes.count { write(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[runStart..<bytes.count]))) }
        return high & 0x8080_8080_8080_8080 == 0
    }

    /// Whether any of a word's eight bytes needs an escape: one below 0x20, a quote or a backslash (the "has less than"
    /// and "has zero byte" tests of Bit Twiddling Hacks, exact for the question whether any byte matches). The same
    /// bytes end the parser's fast scan through a string (`JSONParser`).
    @inline(__always)
    static func needsEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let control = (word &- ones &* 0x20) & ~word
        let quote = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
        let backslash = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        return ((control | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)) & highs) != 0
    }
}

extension ByteBuffer {
    /// Writes `text` as a JSON string literal, quotes included: the same bytes as `JSONValue.string(text).canonicalJSON`,
    /// without making that string first (the changes page writes five per change).
    public mutating func writeJSONString(_ text: String) {
        writeInteger(UInt8(ascii: "\""))
        JSONStringEscaping.pieces(of: text) { writeBytes($0) }
        writeInteger(UInt8(ascii: "\""))
    }
}
