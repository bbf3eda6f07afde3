public import NIOCore

/// Writes JSON text straight into memory a `ByteBuffer` reserved for it (`ByteBuffer.writeJSON(bound:_:)`): a whole
/// object in one reservation, where a `ByteBuffer` write per literal, string and quote (thirteen per change on the
/// changes page) paid a capacity check and an exclusivity check each (a seventh of the page's instructions).
///
/// The caller promises, through the bound it reserves, that everything written fits: `jsonStringBound(_:)` is the
/// most a string literal can take. Writing past the bound is a programming error and traps.
public struct JSONByteWriter: ~Copyable {
    let base: UnsafeMutableRawBufferPointer
    var count = 0

    init(_ base: UnsafeMutableRawBufferPointer) {
        self.base = base
    }

    /// The most bytes `writeJSONString(text)` writes: every byte escaped as `\u00xx`, and the quotes.
    public static func jsonStringBound(_ text: String) -> Int { text.utf8.count * 6 + 2 }

    /// The most bytes `writeJSONString(cell)` writes: every byte escaped as `\u00xx` (or, where the bytes are not valid
    /// UTF-8, replaced by U+FFFD: three bytes), and the quotes.
    public static func jsonStringBound(_ cell: UTF8Cell) -> Int { cell.count * 6 + 2 }

    /// The most bytes `writeRaw(cell)` writes: the bytes themselves, or three for each where they are not valid UTF-8
    /// and are replaced by U+FFFD.
    public static func rawBound(_ cell: UTF8Cell) -> Int { cell.count * 3 }

    /// The most bytes `writeDecimal` writes.
    public static let decimalBound = 20

    @inline(__always)
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= base.count, "JSONByteWriter: the bound was too small")
        guard let source = bytes.baseAddress, let target = base.baseAddress else { return }
        (target + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }

    /// Bytes as they are: a literal of the JSON's structure.
    public mutating func write(_ literal: StaticString) {
        append(UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// A string's UTF-8 as it is: text that is JSON already (a stored canonical JSON column).
    public mutating func writeRaw(_ text: String) {
        var text = text
        text.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// `text` as a JSON string literal, quotes included: the bytes of `JSONValue.string(text).canonicalJSON`.
    public mutating func writeJSONString(_ text: String) {
        write("\"")
        JSONStringEscaping.pieces(of: text) { append($0) }
        write("\"")
    }

    /// A stored column that is JSON text already, as it is (repaired where it is not valid UTF-8).
    public mutating func writeRaw(_ cell: UTF8Cell) {
        guard cell.isValidUTF8 else { return writeRaw(cell.string) }
        append(UnsafeRawBufferPointer(cell.bytes))
    }

    /// Stored text as a JSON string literal, quotes included: the same bytes as `writeJSONString(cell.string)`,
    /// without making that string.
    ///
    /// The bytes are checked for UTF-8 only when the escaping's scan met a byte above 0x7F (it looks at every byte
    /// anyway); what was written is taken back and the repaired string written when they are not valid.
    public mutating func writeJSONString(_ cell: UTF8Cell) {
        let start = count
        write("\"")
        let ascii = JSONStringEscaping.pieces(ofUTF8: cell.bytes) { append($0) }
        guard ascii || cell.validatesBeyondASCII else {
            count = start
            return writeJSONString(cell.string)
        }
        write("\"")
    }

    /// An integer in decimal.
    public mutating func writeDecimal(_ value: Int64) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: a sign and 19 digits fit
        let written = withUnsafeMutableBytes(of: &digits) { raw -> Int in
            var magnitude = value.magnitude
            var index = raw.count
            repeat {
                index -= 1
                raw[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                index -= 1
                raw[index] = UInt8(ascii: "-")
            }
            return index
        }
        withUnsafeBytes(of: &digits) { append(UnsafeRawBufferPointer(rebasing: $0[written...])) }
    }
}

extension ByteBuffer {
    /// Reserves `bound` bytes and lets `body` write JSON into them; the buffer keeps what it wrote.
    public mutating func writeJSON(bound: Int, _ body: (inout JSONByteWriter) -> Void) {
        writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { raw in
            var writer = JSONByteWriter(raw)
            body(&writer)
            return writer.count
        }
    }
}
