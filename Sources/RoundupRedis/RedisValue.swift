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

    @inlinable
    func write(to buffer: inout ByteBuffer) {
        switch storage {
        case .string(let s):
            buffer.writeInteger(UInt8(ascii: "$"))
            buffer.writeString(String(s.utf8.count))
            buffer.writeStaticString("\r\n")
            buffer.writeString(s)
        case .bytes(let b):
            buffer.writeInteger(UInt8(ascii: "$"))
            buffer.writeString(String(b.count))
            buffer.writeStaticString("\r\n")
            buffer.writeBytes(b)
        case .buffer(let b):
            buffer.writeInteger(UInt8(ascii: "$"))
            buffer.writeString(String(b.readableBytes))
            buffer.writeStaticString("\r\n")
            buffer.writeImmutableBuffer(b)
        }
        buffer.writeStaticString("\r\n")
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

    /// The command name, for errors and logs (arguments are never logged: they may hold secrets).
    public var name: String {
        if case .string(let s) = arguments.first?.storage { return s }
        return "?"
    }

    func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "*"))
        buffer.writeString(String(arguments.count))
        buffer.writeStaticString("\r\n")
        for argument in arguments { argument.write(to: &buffer) }
    }
}
