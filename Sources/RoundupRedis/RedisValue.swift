public import NIOCore

/// A decoded RESP reply.
public enum RedisValue: Sendable, Equatable, CustomStringConvertible {
    case status(String)
    case error(String)
    case integer(Int)
    case bulk([UInt8])
    case null
    case array([RedisValue])

    public var string: String? {
        switch self {
        case .status(let s): return s
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .integer(let i): return String(i)
        default: return nil
        }
    }

    public var int: Int? {
        switch self {
        case .integer(let i): return i
        case .bulk, .status: return string.flatMap { Int($0) }
        default: return nil
        }
    }

    public var array: [RedisValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    public var bytes: [UInt8]? {
        switch self {
        case .bulk(let b): return b
        case .status(let s): return Array(s.utf8)
        default: return nil
        }
    }

    /// An error reply's text (without its `-`), else nil.
    public var errorReply: String? {
        if case .error(let text) = self { return text }
        return nil
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .status(let s): return "+\(s)"
        case .error(let e): return "-\(e)"
        case .integer(let i): return ":\(i)"
        case .bulk(let b): return "$\(String(decoding: b.prefix(64), as: UTF8.self))"
        case .null: return "(nil)"
        case .array(let a): return "[\(a.map(\.description).joined(separator: ", "))]"
        }
    }
}

/// One argument of a command: bytes, written as a RESP bulk string.
public struct RedisArgument: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    @usableFromInline var storage: Storage
    @usableFromInline enum Storage: Sendable {
        case string(String)
        case bytes([UInt8])
        case buffer(ByteBuffer)
    }

    public init(_ string: String) { storage = .string(string) }
    public init(bytes: [UInt8]) { storage = .bytes(bytes) }
    public init(buffer: ByteBuffer) { storage = .buffer(buffer) }
    public init(_ int: Int) { storage = .string(String(int)) }
    public init(stringLiteral value: String) { storage = .string(value) }
    public init(integerLiteral value: Int) { storage = .string(String(value)) }

    /// How many bytes the argument itself holds.
    @usableFromInline var byteCount: Int {
        switch storage {
        case .string(let s): s.utf8.count
        case .bytes(let b): b.count
        case .buffer(let b): b.readableBytes
        }
    }

    /// Writes the argument as a RESP bulk string (`$<length>\r\n<bytes>\r\n`) at `offset`, which has room for
    /// `RESPWriter.bulkBound(byteCount)` bytes; returns the offset after it.
    @usableFromInline func write(to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        let at = RESPWriter.header(UInt8(ascii: "$"), byteCount, to: out, at: offset)
        func copy(_ bytes: UnsafeRawBufferPointer) -> Int {
            if let base = bytes.baseAddress { (out.baseAddress! + at).copyMemory(from: base, byteCount: bytes.count) }
            return at + bytes.count
        }
        let end: Int
        switch storage {
        case .string(var s): end = s.withUTF8 { copy(UnsafeRawBufferPointer($0)) }
        case .bytes(let b): end = b.withUnsafeBytes(copy)
        case .buffer(let b): end = b.withUnsafeReadableBytes(copy)
        }
        return RESPWriter.crlf(to: out, at: end)
    }
}

/// RESP's framing written straight into reserved bytes: a command is encoded with one capacity check and one copy of
/// each argument, instead of a `ByteBuffer` write (with its bounds and uniqueness checks) per length, prefix and CRLF.
@usableFromInline enum RESPWriter {
    /// The most bytes a bulk string of `count` bytes takes: `$`, up to 20 digits, CRLF, the bytes, CRLF.
    @inlinable static func bulkBound(_ count: Int) -> Int { count + 25 }

    /// `<prefix><decimal value>\r\n`; `value` is a count, never negative.
    @inlinable static func header(_ prefix: UInt8, _ value: Int, to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        out[offset] = prefix
        var digits = 1
        var rest = value
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        rest = value
        var position = offset + digits
        repeat {
            out[position] = UInt8(truncatingIfNeeded: 48 + rest % 10)
            rest /= 10
            position -= 1
        } while rest > 0
        return crlf(to: out, at: offset + 1 + digits)
    }

    @inlinable static func crlf(to out: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        out[offset] = UInt8(ascii: "\r")
        out[offset + 1] = UInt8(ascii: "\n")
        return offset + 2
    }
}

/// A command: its name and arguments, encoded as a RESP array of bulk strings.
public struct RedisCommand: Sendable {
    public var arguments: [RedisArgument]

    public init(_ name: String, _ arguments: [RedisArgument] = []) {
        self.arguments = [RedisArgument(name)] + arguments
    }

    public init(_ name: String, _ arguments: RedisArgument...) {
        self.init(name, arguments)
    }

    /// A command whose arguments, name first, are already in one array.
    public init(nameAndArguments: [RedisArgument]) {
        self.arguments = nameAndArguments
    }

    /// The command name, for errors and logs (arguments are never logged: they may hold secrets).
    public var name: String {
        if case .string(let s) = arguments.first?.storage { return s }
        return "?"
    }

    /// The most bytes `encode(into:)` writes.
    var encodedBound: Int {
        var total = RESPWriter.bulkBound(0)
        for argument in arguments { total += RESPWriter.bulkBound(argument.byteCount) }
        return total
    }

    func encode(into buffer: inout ByteBuffer) {
        let bound = encodedBound
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { out in
            var at = RESPWriter.header(UInt8(ascii: "*"), arguments.count, to: out, at: 0)
            for argument in arguments { at = argument.write(to: out, at: at) }
            return at
        }
    }
}
