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
        /// The write was done, but fewer replicas than asked acknowledged it in time (`WAIT`): a failover now could lose it.
        case notReplicated
    }

    public let code: Code
    public let message: String
    /// For an error reply of Redis (`.server`): its code, read once where the reply arrived.
    public let replyCode: RedisErrorCode?

    /// Redis answered that the stream or its consumer group does not exist yet (nothing was ever consumed from it).
    public var isNoGroup: Bool { replyCode == .noGroup }

    public init(_ code: Code, _ message: String, replyCode: RedisErrorCode? = nil) {
        self.code = code
        self.message = message
        self.replyCode = replyCode
    }

    /// An error reply of Redis (`reply`, without its `-`), answering `what` (a command's or a script's name).
    public static func reply(_ reply: String, answering what: String) -> RedisClientError {
        RedisClientError(.server, "\(what): \(reply)", replyCode: RedisErrorCode(reply: reply))
    }

    /// True when the failure says nothing about the command itself: retrying later may succeed.
    public var isTransient: Bool {
        switch code {
        case .connectionFailed, .connectionClosed, .timeout, .notReplicated: return true
        case .server: return replyCode?.isTransient ?? false
        default: return false
        }
    }

    public var description: String { "redis \(code): \(message)" }
}

/// The code an error reply of Redis starts with (`-NOGROUP No such key…`, `-MOVED 3999 127.0.0.1:6381`): the kind of
/// refusal. Read once, where a reply becomes an error; nothing matches the reply's text anywhere else.
public enum RedisErrorCode: Sendable, Hashable {
    case err, wrongType, noGroup, busyGroup, noScript, busy, loading, tryAgain, clusterDown, moved, ask, oom, readOnly, noAuth, noPerm
    case execAbort, masterDown
    /// A command or script named keys of several slots of a cluster.
    case crossSlot
    /// A code this client has no case for (its first word, at most 32 characters).
    case other(String)

    public init(reply: String) {
        let word = reply.prefix { $0 != " " }
        switch word {
        case "ERR": self = .err
        case "WRONGTYPE": self = .wrongType
        case "NOGROUP": self = .noGroup
        case "BUSYGROUP": self = .busyGroup
        case "NOSCRIPT": self = .noScript
        case "BUSY": self = .busy
        case "LOADING": self = .loading
        case "TRYAGAIN": self = .tryAgain
        case "CLUSTERDOWN": self = .clusterDown
        case "MOVED": self = .moved
        case "ASK": self = .ask
        case "OOM": self = .oom
        case "READONLY": self = .readOnly
        case "NOAUTH": self = .noAuth
        case "NOPERM": self = .noPerm
        case "EXECABORT": self = .execAbort
        case "MASTERDOWN": self = .masterDown
        case "CROSSSLOT": self = .crossSlot
        default: self = .other(String(word.prefix(32)))
        }
    }

    /// Redis could not run the command now (a script running, the dataset loading, a slot migrating): the same command
    /// may succeed later.
    public var isTransient: Bool {
        switch self {
        case .busy, .loading, .tryAgain: return true
        default: return false
        }
    }
}

extension Result where Failure == any Error {
    /// The value `body` returns, or the error it throws.
    init(awaiting body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
