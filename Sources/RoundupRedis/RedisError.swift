/// What went wrong talking to Redis. Messages name the command and the endpoint, never arguments.
public struct RedisClientError: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Code: Sendable, Equatable {
        case connectionFailed
        case connectionClosed
        case timeout
        case protocolError
        case server
        case invalidURL
        case unexpectedReply
    }

    public let code: Code
    public let message: String

    /// Redis answered that the stream or its consumer group does not exist yet (nothing was ever consumed from it).
    public var isNoGroup: Bool { code == .server && message.contains("NOGROUP") }

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// True when the failure says nothing about the command itself: retrying later may succeed.
    public var isTransient: Bool {
        switch code {
        case .connectionFailed, .connectionClosed, .timeout: return true
        case .server: return message.hasPrefix("LOADING") || message.hasPrefix("BUSY") || message.hasPrefix("TRYAGAIN")
        default: return false
        }
    }

    public var description: String { "redis \(code): \(message)" }
}
