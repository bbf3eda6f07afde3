import Crypto
public import Logging
import NIOConcurrencyHelpers
public import NIOCore
public import NIOPosix

/// A small pool of pipelined connections. A connection that fails is dropped and a new one is opened
/// on the next use, so the client recovers by itself when Redis comes back.
public final class RedisClient: Sendable {
    public let configuration: RedisConfiguration
    private let group: any EventLoopGroup
    private let slots: [NIOLockedValueBox<Slot>]
    private let next = NIOLockedValueBox(0)
    private let loopSlots = NIOLockedValueBox([ObjectIdentifier: NIOLockedValueBox<Slot>]())
    /// Whether the last connection attempt worked: failures are logged once per outage, not per attempt.
    private let reachable = NIOLockedValueBox(true)
    private let logger: Logger

    private enum Slot {
        case idle
        case connecting(EventLoopFuture<RedisConnection>)
        case connected(RedisConnection)
    }

    public init(
        configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "roundup.redis")
    ) {
        self.configuration = configuration
        self.group = eventLoopGroup
        self.slots = (0..<max(1, configuration.poolSize)).map { _ in NIOLockedValueBox(Slot.idle) }
        self.logger = logger
    }

    /// A pooled connection, opened if needed. Connections are shared: requests on one are pipelined.
    /// Given an event loop, the connection lives on that loop, so a NIO handler's request never hops threads.
    public func connection(on eventLoop: (any EventLoop)? = nil) -> EventLoopFuture<RedisConnection> {
        if let eventLoop {
            let key = ObjectIdentifier(eventLoop)
            let slot = loopSlots.withLockedValue { slots in
                if let slot = slots[key] { return slot }
                let slot = NIOLockedValueBox(Slot.idle)
                slots[key] = slot
                return slot
            }
            return connection(slot: slot, loop: eventLoop)
        }
        let index = next.withLockedValue { value -> Int in
            defer { value = (value &+ 1) % slots.count }
            return value
        }
        return connection(slot: slots[index], loop: group.next())
    }

    private func connection(slot: NIOLockedValueBox<Slot>, loop: any EventLoop) -> EventLoopFuture<RedisConnection> {
        // Decide under the lock; register callbacks after it is released (a completed future runs them at once,
        // and they take the same lock).
        let (future, isNew) = slot.withLockedValue { state -> (EventLoopFuture<RedisConnection>, Bool) in
            switch state {
            case .connected(let connection) where connection.isActive:
                return (connection.eventLoop.makeSucceededFuture(connection), false)
            case .connecting(let future):
                return (future, false)
            case .connected, .idle:
                let future = RedisConnection.connect(configuration, on: loop)
                state = .connecting(future)
                return (future, true)
            }
        }
        guard isNew else { return future }
        let logger = self.logger
        let endpoint = configuration.endpoint
        let reachable = self.reachable
        future.whenComplete { result in
            switch result {
            case .success(let connection):
                slot.withLockedValue { $0 = .connected(connection) }
                if reachable.withLockedValue({ (up: inout Bool) -> Bool in
                    let wasDown = !up
                    up = true
                    return wasDown
                }) {
                    logger.notice("redis reachable again", metadata: ["endpoint": "\(endpoint)"])
                }
                connection.closeFuture.whenComplete { _ in
                    slot.withLockedValue { state in
                        if case .connected(let current) = state, current === connection { state = .idle }
                    }
                }
            case .failure(let error):
                slot.withLockedValue { $0 = .idle }
                let first = reachable.withLockedValue { (up: inout Bool) -> Bool in
                    let wasUp = up
                    up = false
                    return wasUp
                }
                logger.log(level: first ? .warning : .debug, "redis connect failed", metadata: ["endpoint": "\(endpoint)", "error": "\(error)"])
            }
        }
        return future
    }

    /// A connection of its own, outside the pool, for blocking commands (XREADGROUP BLOCK).
    public func dedicatedConnection() -> EventLoopFuture<RedisConnection> {
        RedisConnection.connect(configuration, on: group.next())
    }

    public func send(_ command: RedisCommand, timeout: TimeAmount? = nil, on eventLoop: (any EventLoop)? = nil) -> EventLoopFuture<RedisValue> {
        connection(on: eventLoop).flatMap { $0.send(command, timeout: timeout) }
    }

    public func pipeline(_ commands: [RedisCommand], timeout: TimeAmount? = nil) -> EventLoopFuture<[RedisValue]> {
        connection().flatMap { $0.pipeline(commands, timeout: timeout) }
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
    /// on the connection's loop.
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
        if let eventLoop, let connection = connectedConnection(on: eventLoop) {
            send(connection)
        } else {
            connection(on: eventLoop).whenComplete { result in
                switch result {
                case .success(let connection): send(connection)
                case .failure(let error): answer(.failure(error))
                }
            }
        }
    }

    /// The connection already open on `eventLoop`, if there is one (no future needed).
    private func connectedConnection(on eventLoop: any EventLoop) -> RedisConnection? {
        let key = ObjectIdentifier(eventLoop)
        guard let slot = loopSlots.withLockedValue({ $0[key] }) else { return nil }
        return slot.withLockedValue { state in
            if case .connected(let connection) = state, connection.isActive { return connection }
            return nil
        }
    }

    public func evaluate(
        _ script: RedisScript, keys: [RedisArgument], arguments: [RedisArgument], timeout: TimeAmount? = nil
    ) async throws -> RedisValue {
        try await evaluate(script, keys: keys, arguments: arguments, timeout: timeout).get()
    }

    /// Closes every pooled connection.
    public func shutdown() async {
        for slot in slots + loopSlots.withLockedValue({ Array($0.values) }) {
            let state = slot.withLockedValue { state -> Slot in
                defer { state = .idle }
                return state
            }
            switch state {
            case .connected(let connection): try? await connection.close().get()
            case .connecting(let future): try? await future.get().close().get()
            case .idle: break
            }
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
