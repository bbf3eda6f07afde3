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
    /// A standalone primary's replicas, as last learnt (for `RedisReplicaWait`'s auto count).
    private let replicas = NIOLockedValueBox((count: 0, at: NIODeadline?.none, learning: false))

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

    /// `pipeline`, each command's own outcome: in a cluster a primary that cannot be reached (or whose connection
    /// fails) fails its commands only, and the others' replies are kept. On a standalone Redis the commands succeed or
    /// fail together.
    public func pipelineEach(_ commands: [RedisCommand], timeout: TimeAmount? = nil) async -> [Result<RedisValue, any Error>] {
        if let router { return await router.executeEach(commands, timeout: timeout) }
        do {
            return try await pipeline(commands, timeout: timeout).map { .success($0) }
        } catch {
            return commands.map { _ in .failure(error) }
        }
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
    ///
    /// With `replicas`, the script's writes count only once that many replicas of the primary that ran it acknowledged
    /// them (`WAIT`, sent right after the script on the same connection); fewer in time fail it with `.notReplicated`.
    public func evaluate(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount? = nil, replicas: RedisReplicaWait? = nil,
        on eventLoop: any EventLoop, completion: @escaping @Sendable (Result<RedisValue, any Error>) -> Void
    ) {
        run(script, keys: keys, arguments: arguments, timeout: timeout, replicas: replicas, on: eventLoop) { result in
            if eventLoop.inEventLoop { completion(result) } else { eventLoop.execute { completion(result) } }
        }
    }

    /// EVALSHA, then EVAL after NOSCRIPT, on a connection of `eventLoop` (of the pool without one); `answer` is called
    /// on the connection's loop. In a cluster, on the primary serving the first key; an answer that asks for the
    /// cluster's rules (a redirect, a slot not served now) runs the script again through them.
    private func run(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount?, replicas: RedisReplicaWait? = nil,
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
        // How many replicas to wait for: those asked, or (auto) one when the primary has any.
        let wait = replicas.flatMap { replicas in
            // (The slot only matters in a cluster: a standalone Redis's replicas are its own.)
            replicaCount(serving: router == nil ? nil : keys.first?.hashSlot, asked: replicas).map {
                RedisCommand.wait(replicas: $0, timeout: replicas.timeout)
            }
        }
        if let single {
            pool = single
        } else {
            let router = router!
            let slowly: @Sendable () -> Void = {
                Task {
                    answer(
                        await Result(awaiting: { try await Self.evaluate(script, evalSHA: evalSHA, timeout: timeout, wait: wait, router: router) }))
                }
            }
            guard let first = keys.first, let owner = router.pool(serving: first.hashSlot) else { return slowly() }
            guard let eventLoop, let connection = owner.connectedConnection(on: eventLoop) else {
                return owner.connection(on: eventLoop).whenComplete { _ in slowly() }
            }
            // The common case: the owner's connection on this loop is open, the script is loaded there.
            connection.pipeline([RedisCommand(nameAndArguments: evalSHA)] + (wait.map { [$0] } ?? []), timeout: timeout).whenComplete { result in
                switch result {
                case .success(let replies):
                    if case .error(let message) = replies[0] {
                        if RedisErrorCode(reply: message).asksForClusterRules { return slowly() }
                        answer(.failure(RedisClientError.reply(message, answering: "script \(script.name)")))
                    } else {
                        answer(
                            Self.replicated(replies[0], wait: wait, acknowledged: replies.count > 1 ? replies[1] : nil, router: router, client: nil))
                    }
                case .failure(let error):
                    router.refreshInBackground()
                    answer(.failure(error))
                }
            }
            return
        }
        let send: @Sendable (RedisConnection) -> Void = { [self] connection in
            let waiting = wait.map { [$0] } ?? []
            connection.pipeline([RedisCommand(nameAndArguments: evalSHA)] + waiting, timeout: timeout).whenComplete { result in
                switch result {
                case .failure(let error):
                    answer(.failure(error))
                case .success(let replies):
                    switch replies[0] {
                    case .error(let message) where RedisErrorCode(reply: message) == .noScript:
                        var eval = evalSHA
                        eval[0] = "EVAL"
                        eval[1] = RedisArgument(script.source)
                        connection.pipeline([RedisCommand(nameAndArguments: eval)] + waiting, timeout: timeout).whenComplete { result in
                            answer(
                                result.flatMap { replies in
                                    if case .error(let message) = replies[0] {
                                        return .failure(RedisClientError.reply(message, answering: "script \(script.name)"))
                                    }
                                    return Self.replicated(
                                        replies[0], wait: wait, acknowledged: replies.count > 1 ? replies[1] : nil, router: nil, client: self)
                                })
                        }
                    case .error(let message):
                        answer(.failure(RedisClientError.reply(message, answering: "script \(script.name)")))
                    case let reply:
                        answer(Self.replicated(reply, wait: wait, acknowledged: replies.count > 1 ? replies[1] : nil, router: nil, client: self))
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

    /// A script through the cluster's rules: EVALSHA, and EVAL on the node that did not know it; then its WAIT, on the
    /// primary that ran it (sent right after it on the same connection, wherever a redirect takes it).
    private static func evaluate(
        _ script: RedisScript, evalSHA: [RedisArgument], timeout: TimeAmount?, wait: RedisCommand?, router: RedisClusterRouter
    ) async throws -> RedisValue {
        var replies = try await router.execute([RedisCommand(nameAndArguments: evalSHA)], timeout: timeout, then: wait)
        if case .error(let message) = replies[0], RedisErrorCode(reply: message) == .noScript {
            var eval = evalSHA
            eval[0] = "EVAL"
            eval[1] = RedisArgument(script.source)
            replies = try await router.execute([RedisCommand(nameAndArguments: eval)], timeout: timeout, then: wait)
        }
        if case .error(let message) = replies[0] { throw RedisClientError.reply(message, answering: "script \(script.name)") }
        return try replicated(replies[0], wait: wait, acknowledged: replies.count > 1 ? replies[1] : nil, router: router, client: nil).get()
    }

    /// The script's reply once `WAIT` says enough replicas have its writes; `.notReplicated` when fewer did (and the
    /// replicas are learnt again: one may have gone).
    private static func replicated(
        _ reply: RedisValue, wait: RedisCommand?, acknowledged: RedisValue?, router: RedisClusterRouter?, client: RedisClient?
    ) -> Result<RedisValue, any Error> {
        guard let wait else { return .success(reply) }
        // WAIT refused (a proxy that does not know it, a replica): not an acknowledgement count, and said so.
        if case .error(let message)? = acknowledged { return .failure(RedisClientError.reply(message, answering: "WAIT")) }
        let asked = wait.arguments.count > 1 ? wait.arguments[1].word.flatMap { Int($0) } ?? 1 : 1
        let got = acknowledged?.int ?? 0
        if got >= asked { return .success(reply) }
        router?.refreshInBackground()
        client?.learnReplicas()
        return .failure(RedisClientError(.notReplicated, "\(got) of \(asked) replicas acknowledged the write in time"))
    }

    /// How many replicas to `WAIT` for on the primary serving `slot`: `asked`'s count, or (auto) one if it has any
    /// replica as last learnt; nil for none.
    private func replicaCount(serving slot: RedisHashSlot?, asked: RedisReplicaWait) -> Int? {
        if case .exactly(let count) = asked.count { return count > 0 ? count : nil }
        let known: Int
        if let router {
            guard let slot, let shard = router.topology?.shard(serving: slot) else { return nil }
            known = shard.replicas.count
        } else {
            known = standaloneReplicas()
        }
        return known > 0 ? 1 : nil
    }

    /// The replicas a standalone primary has (`INFO replication`'s `connected_slaves`), learnt every few seconds in the
    /// background; 0 until first learnt.
    private func standaloneReplicas() -> Int {
        let (count, stale) = replicas.withLockedValue { state -> (Int, Bool) in
            let stale = state.at.map { NIODeadline.now() - $0 > .seconds(5) } ?? true
            return (state.count, stale && !state.learning)
        }
        if stale { learnReplicas() }
        return count
    }

    /// Reads the standalone primary's replicas again, in the background (one read at a time).
    func learnReplicas() {
        guard let single else { return }
        let start = replicas.withLockedValue { state -> Bool in
            if state.learning { return false }
            state.learning = true
            return true
        }
        guard start else { return }
        let replicas = self.replicas
        single.pipeline([RedisCommand("INFO", ["replication"])], timeout: .seconds(1)).whenComplete { result in
            let count: Int? = (try? result.get())?.first?.string.flatMap { info in
                info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("connected_slaves:") }.flatMap {
                    Int($0.dropFirst("connected_slaves:".count))
                }
            }
            replicas.withLockedValue { state in
                state.learning = false
                if let count {
                    state.count = count
                    state.at = .now()
                }
            }
        }
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

    /// Walks the keys matching `pattern` with SCAN on the one node serving `key`'s slot (a standalone Redis: its only
    /// one), calling `body` with each page, at most `maxPages` pages; returns whether the walk reached its end. Meant
    /// for patterns whose keys share `key`'s hash tag: never a walk of the whole cluster.
    public func scan(
        matching pattern: String, onNodeServing key: String, count: Int = 1000, maxPages: Int, timeout: TimeAmount? = nil,
        _ body: ([String]) async throws -> Void
    ) async throws -> Bool {
        let pool: RedisNodePool
        if let single {
            pool = single
        } else {
            pool = try await router!.owner(of: RedisHashSlot(key: key))
        }
        return try await Self.scan(pool, matching: pattern, count: count, maxPages: maxPages, timeout: timeout, body)
    }

    /// Walks the keys matching `pattern` on every primary, for tools and tests that must see the whole keyspace (the
    /// server itself never does: its walks name one slot).
    public func scanEveryPrimary(matching pattern: String, count: Int = 1000, _ body: ([String]) async throws -> Void) async throws {
        let pools: [RedisNodePool]
        if let single { pools = [single] } else { pools = try await router!.primaries() }
        for pool in pools { _ = try await Self.scan(pool, matching: pattern, count: count, maxPages: .max, timeout: nil, body) }
    }

    private static func scan(
        _ pool: RedisNodePool, matching pattern: String, count: Int, maxPages: Int, timeout: TimeAmount?, _ body: ([String]) async throws -> Void
    ) async throws -> Bool {
        var cursor = "0"
        for _ in 0..<maxPages {
            let reply = try await pool.pipeline(
                [RedisCommand("SCAN", [RedisArgument(cursor), "MATCH", RedisArgument(pattern), "COUNT", RedisArgument(count)])], timeout: timeout
            ).get()[0]
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "SCAN") }
            guard let parts = reply.array, parts.count == 2, let next = parts[0].string else {
                throw RedisClientError(.unexpectedReply, "SCAN answered \(reply)")
            }
            let found = (parts[1].array ?? []).compactMap(\.string)
            if !found.isEmpty { try await body(found) }
            cursor = next
            if cursor == "0" { return true }
        }
        return false
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

/// How many replicas must acknowledge a script's writes before it counts (`WAIT`), and how long to wait for them.
public struct RedisReplicaWait: Sendable, Equatable {
    public enum Count: Sendable, Equatable {
        /// One, when the primary has a replica (as last learnt); none otherwise.
        case auto
        case exactly(Int)
    }

    public var count: Count
    public var timeout: TimeAmount

    public init(count: Count, timeout: TimeAmount) {
        self.count = count
        self.timeout = timeout
    }
}

extension RedisCommand {
    /// `WAIT n ms` (at least 1 ms: 0 would wait forever).
    static func wait(replicas: Int, timeout: TimeAmount) -> RedisCommand {
        RedisCommand("WAIT", [RedisArgument(replicas), RedisArgument(max(1, Int(timeout.nanoseconds / 1_000_000)))])
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
