import Crypto
public import Logging
import NIOConcurrencyHelpers
public import NIOCore
public import NIOPosix

/// The server's Redis client: a small pool of pipelined connections to one Redis, or, for a cluster
/// (`RedisConfiguration.cluster`), a pool per primary with each command routed to the primary serving its key
/// (`RedisClusterRouter`). A connection that fails is dropped and a new one is opened on the next use, so the client
/// recovers by itself when Redis comes back.
public final class RedisClient: Sendable {
    public let configuration: RedisConfiguration
    private let group: any EventLoopGroup
    /// Standalone Redis: its pool.
    private let single: RedisNodePool?
    /// Redis Cluster: the map and the pools of its primaries.
    private let router: RedisClusterRouter?

    public init(
        configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "roundup.redis")
    ) {
        self.configuration = configuration
        self.group = eventLoopGroup
        if configuration.cluster {
            self.single = nil
            self.router = RedisClusterRouter(configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
        } else {
            self.single = RedisNodePool(configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
            self.router = nil
        }
    }

    /// Whether this client talks to a Redis Cluster.
    public var isCluster: Bool { router != nil }

    /// A connection of its own, outside the pool, for blocking commands (XREADGROUP BLOCK) on `key`: in a cluster, to
    /// the primary serving the key's slot (a read that then answers `MOVED` needs a new one).
    public func dedicatedConnection(for key: String) -> EventLoopFuture<RedisConnection> {
        if let single { return single.dedicatedConnection() }
        let promise = group.next().makePromise(of: RedisConnection.self)
        let router = router!
        promise.completeWithTask { try await router.dedicatedConnection(serving: RedisHashSlot(key: key)) }
        return promise.futureResult
    }

    /// Sends one command; a server error reply is thrown as `RedisClientError(.server)`.
    public func send(_ command: RedisCommand, timeout: TimeAmount? = nil, on eventLoop: (any EventLoop)? = nil) -> EventLoopFuture<RedisValue> {
        if let single { return single.connection(on: eventLoop).flatMap { $0.send(command, timeout: timeout) } }
        return clustered(on: eventLoop) { router in
            let reply = try await router.execute([command], timeout: timeout)[0]
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: command.name) }
            return reply
        }
    }

    /// Sends several commands and returns their replies in order, error replies as `.error` values. Standalone, they
    /// leave in one write; in a cluster, in one write per primary, in their order there.
    public func pipeline(_ commands: [RedisCommand], timeout: TimeAmount? = nil) -> EventLoopFuture<[RedisValue]> {
        if let single { return single.pipeline(commands, timeout: timeout) }
        return clustered(on: nil) { router in try await router.execute(commands, timeout: timeout) }
    }

    private func clustered<Value: Sendable>(
        on eventLoop: (any EventLoop)?, _ body: @escaping @Sendable (RedisClusterRouter) async throws -> Value
    ) -> EventLoopFuture<Value> {
        let promise = (eventLoop ?? group.next()).makePromise(of: Value.self)
        let router = router!
        promise.completeWithTask { try await body(router) }
        return promise.futureResult
    }

    public func send(_ name: String, _ arguments: RedisArgument..., timeout: TimeAmount? = nil) async throws -> RedisValue {
        try await send(RedisCommand(name, arguments), timeout: timeout).get()
    }

    public func send(_ command: RedisCommand, timeout: TimeAmount? = nil) async throws -> RedisValue {
        try await send(command, timeout: timeout).get()
    }

    public func pipeline(_ commands: [RedisCommand], timeout: TimeAmount? = nil) async throws -> [RedisValue] {
        try await pipeline(commands, timeout: timeout).get()
    }

    /// Runs a Lua script by its SHA1 (EVALSHA), loading it with EVAL when the server does not know it yet.
    public func evaluate(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount? = nil,
        on eventLoop: (any EventLoop)? = nil
    ) -> EventLoopFuture<RedisValue> {
        let promise = (eventLoop ?? group.next()).makePromise(of: RedisValue.self)
        run(script, keys: keys, arguments: arguments, timeout: timeout, on: eventLoop) { promise.completeWith($0) }
        return promise.futureResult
    }

    /// Runs a Lua script as `evaluate` does, and calls `completion` with its reply on `eventLoop`, on a connection
    /// that lives on that loop, without a chain of futures: each future is an allocation and, in NIO's generic code,
    /// several lookups of type metadata — a tenth of the ingress's instructions per webhook went to them.
    public func evaluate(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount? = nil,
        on eventLoop: any EventLoop, completion: @escaping @Sendable (Result<RedisValue, any Error>) -> Void
    ) {
        run(script, keys: keys, arguments: arguments, timeout: timeout, on: eventLoop) { result in
            if eventLoop.inEventLoop { completion(result) } else { eventLoop.execute { completion(result) } }
        }
    }

    /// EVALSHA, then EVAL after NOSCRIPT, on a connection of `eventLoop` (of the pool without one); `answer` is called
    /// on the connection's loop. In a cluster, on the primary serving the first key; an answer that asks for the
    /// cluster's rules (a redirect, a slot not served now) runs the script again through them.
    private func run(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount?,
        on eventLoop: (any EventLoop)?, answer: @escaping @Sendable (Result<RedisValue, any Error>) -> Void
    ) {
        var all: [RedisArgument] = []
        all.reserveCapacity(3 + keys.count + arguments.count)
        all.append("EVALSHA")
        all.append(RedisArgument(script.sha1))
        all.append(RedisArgument(keys.count))
        all.append(contentsOf: keys)
        all.append(contentsOf: arguments)
        let evalSHA = all
        let pool: RedisNodePool
        if let single {
            pool = single
        } else {
            let router = router!
            let slowly: @Sendable () -> Void = {
                Task { answer(await Result(awaiting: { try await Self.evaluate(script, evalSHA: evalSHA, timeout: timeout, router: router) })) }
            }
            guard let first = keys.first, let owner = router.pool(serving: first.hashSlot) else { return slowly() }
            guard let eventLoop, let connection = owner.connectedConnection(on: eventLoop) else {
                return owner.connection(on: eventLoop).whenComplete { _ in slowly() }
            }
            // The common case: the owner's connection on this loop is open, the script is loaded there.
            connection.pipeline([RedisCommand(nameAndArguments: evalSHA)], timeout: timeout).whenComplete { result in
                switch result {
                case .success(let replies):
                    if case .error(let message) = replies[0] {
                        if RedisErrorCode(reply: message).asksForClusterRules { return slowly() }
                        answer(.failure(RedisClientError.reply(message, answering: "script \(script.name)")))
                    } else {
                        answer(.success(replies[0]))
                    }
                case .failure(let error):
                    router.refreshInBackground()
                    answer(.failure(error))
                }
            }
            return
        }
        let send: @Sendable (RedisConnection) -> Void = { connection in
            connection.pipeline([RedisCommand(nameAndArguments: evalSHA)], timeout: timeout).whenComplete { result in
                switch result {
                case .failure(let error):
                    answer(.failure(error))
                case .success(let replies):
                    switch replies[0] {
                    case .error(let message) where RedisErrorCode(reply: message) == .noScript:
                        var eval = evalSHA
                        eval[0] = "EVAL"
                        eval[1] = RedisArgument(script.source)
                        connection.send(RedisCommand(nameAndArguments: eval), timeout: timeout).whenComplete(answer)
                    case .error(let message):
                        answer(.failure(RedisClientError.reply(message, answering: "script \(script.name)")))
                    case let reply:
                        answer(.success(reply))
                    }
                }
            }
        }
        if let eventLoop, let connection = pool.connectedConnection(on: eventLoop) {
            send(connection)
        } else {
            pool.connection(on: eventLoop).whenComplete { result in
                switch result {
                case .success(let connection): send(connection)
                case .failure(let error): answer(.failure(error))
                }
            }
        }
    }

    /// A script through the cluster's rules: EVALSHA, and EVAL on the node that did not know it.
    private static func evaluate(
        _ script: RedisScript, evalSHA: [RedisArgument], timeout: TimeAmount?, router: RedisClusterRouter
    ) async throws -> RedisValue {
        var reply = try await router.execute([RedisCommand(nameAndArguments: evalSHA)], timeout: timeout)[0]
        if case .error(let message) = reply, RedisErrorCode(reply: message) == .noScript {
            var eval = evalSHA
            eval[0] = "EVAL"
            eval[1] = RedisArgument(script.source)
            reply = try await router.execute([RedisCommand(nameAndArguments: eval)], timeout: timeout)[0]
        }
        if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "script \(script.name)") }
        return reply
    }

    public func evaluate(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount? = nil
    ) async throws -> RedisValue {
        try await evaluate(script, keys: keys, arguments: arguments, timeout: timeout).get()
    }

    /// Runs `command` on every primary (a standalone Redis is its own only one), each answering for itself: `INFO`,
    /// `DBSIZE`, `SCRIPT LOAD`. Replies come back in slot order, keyed by the node, error replies as `.error` values.
    public func onEveryPrimary(_ command: RedisCommand, timeout: TimeAmount? = nil) async throws -> [(node: RedisNodeAddress, reply: RedisValue)] {
        if let single { return [(single.address, try await single.pipeline([command], timeout: timeout).get()[0])] }
        var replies: [(node: RedisNodeAddress, reply: RedisValue)] = []
        for pool in try await router!.primaries() {
            replies.append((pool.address, try await pool.pipeline([command], timeout: timeout).get()[0]))
        }
        return replies
    }

    /// The cluster's map as last learnt (learnt now if it was not yet); nil for a standalone Redis.
    public func clusterTopology(refresh: Bool = false) async throws -> RedisClusterTopology? {
        guard let router else { return nil }
        return refresh ? try await router.refresh() : try await router.currentTopology()
    }

    /// Closes every pooled connection.
    public func shutdown() async {
        await single?.shutdown()
        await router?.shutdown()
    }
}

extension RedisErrorCode {
    /// The cluster could not serve the command where it was sent, now: it is redirected or retried by the cluster's rules.
    var asksForClusterRules: Bool {
        switch self {
        case .moved, .ask, .tryAgain, .clusterDown, .loading, .busy, .masterDown, .readOnly, .noScript: true
        default: false
        }
    }
}

/// A Lua script, run by SHA1 with a fallback to its source.
public struct RedisScript: Sendable {
    public let name: String
    public let source: String
    public let sha1: String

    public init(name: String, source: String) {
        self.name = name
        self.source = source
        self.sha1 = Insecure.SHA1.hash(data: Array(source.utf8)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
