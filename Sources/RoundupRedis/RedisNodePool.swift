import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A small pool of pipelined connections to one Redis node. A connection that fails is dropped and a new one is opened
/// on the next use, so the pool recovers by itself when the node comes back.
final class RedisNodePool: Sendable {
    let configuration: RedisConfiguration
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

    init(configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger) {
        self.configuration = configuration
        self.group = eventLoopGroup
        self.slots = (0..<max(1, configuration.poolSize)).map { _ in NIOLockedValueBox(Slot.idle) }
        self.logger = logger
    }

    var address: RedisNodeAddress { RedisNodeAddress(host: configuration.host, port: configuration.port) }

    /// A pooled connection, opened if needed. Connections are shared: requests on one are pipelined.
    /// Given an event loop, the connection lives on that loop, so a NIO handler's request never hops threads.
    func connection(on eventLoop: (any EventLoop)? = nil) -> EventLoopFuture<RedisConnection> {
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

    /// The connection already open on `eventLoop`, if there is one (no future needed).
    func connectedConnection(on eventLoop: any EventLoop) -> RedisConnection? {
        let key = ObjectIdentifier(eventLoop)
        guard let slot = loopSlots.withLockedValue({ $0[key] }) else { return nil }
        return slot.withLockedValue { state in
            if case .connected(let connection) = state, connection.isActive { return connection }
            return nil
        }
    }

    func pipeline(_ commands: [RedisCommand], timeout: TimeAmount?, on eventLoop: (any EventLoop)? = nil) -> EventLoopFuture<[RedisValue]> {
        connection(on: eventLoop).flatMap { $0.pipeline(commands, timeout: timeout) }
    }

    /// A connection of its own, outside the pool, for blocking commands (XREADGROUP BLOCK).
    func dedicatedConnection() -> EventLoopFuture<RedisConnection> {
        RedisConnection.connect(configuration, on: group.next())
    }

    /// Closes every pooled connection.
    func shutdown() async {
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
