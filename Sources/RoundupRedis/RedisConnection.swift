import Logging
import NIOConcurrencyHelpers
public import NIOCore
import NIOPosix
import NIOSSL

/// One connection to Redis. Commands sent before earlier replies arrive are pipelined.
public final class RedisConnection: Sendable {
    let channel: any Channel
    let configuration: RedisConfiguration
    /// Set by the handler the moment it fails its requests (a timeout, a protocol error), before the channel has
    /// closed: a request sent in between would only get that failure, so the client opens a new connection instead.
    private let failed: NIOLockedValueBox<Bool>

    init(channel: any Channel, configuration: RedisConfiguration, failed: NIOLockedValueBox<Bool>) {
        self.channel = channel
        self.configuration = configuration
        self.failed = failed
    }

    public var isActive: Bool { channel.isActive && !failed.withLockedValue { $0 } }
    public var eventLoop: any EventLoop { channel.eventLoop }
    public var closeFuture: EventLoopFuture<Void> { channel.closeFuture }

    /// Opens a connection, with TLS for rediss://, then AUTH and SELECT as configured.
    public static func connect(
        _ configuration: RedisConfiguration, on eventLoop: any EventLoop
    ) -> EventLoopFuture<RedisConnection> {
        let sslContext: NIOSSLContext?
        if configuration.tls {
            do {
                var tls = TLSConfiguration.makeClientConfiguration()
                if let ca = configuration.caFile { tls.additionalTrustRoots = [.file(ca)] }
                sslContext = try NIOSSLContext(configuration: tls)
            } catch {
                return eventLoop.makeFailedFuture(
                    RedisClientError(.connectionFailed, "TLS set-up for \(configuration.endpoint) failed: \(error)"))
            }
        } else {
            sslContext = nil
        }
        let endpoint = configuration.endpoint
        let host = configuration.host
        let isIPAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        let failed = NIOLockedValueBox(false)
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(configuration.connectTimeout)
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        let handler = try NIOSSLClientHandler(context: sslContext, serverHostname: isIPAddress ? nil : host)
                        try channel.pipeline.syncOperations.addHandler(handler)
                    }
                    try channel.pipeline.syncOperations.addHandler(RedisChannelHandler(endpoint: endpoint, failed: failed))
                }
            }
        return bootstrap.connect(host: configuration.host, port: configuration.port)
            .flatMapErrorThrowing { error in
                throw RedisClientError(.connectionFailed, "cannot connect to \(endpoint): \(error)")
            }
            .flatMap { channel in
                let connection = RedisConnection(channel: channel, configuration: configuration, failed: failed)
                var handshake: [RedisCommand] = []
                if let password = configuration.password {
                    if let user = configuration.username {
                        handshake.append(RedisCommand("AUTH", [RedisArgument(user), RedisArgument(password)]))
                    } else {
                        handshake.append(RedisCommand("AUTH", [RedisArgument(password)]))
                    }
                }
                if configuration.database != 0 {
                    handshake.append(RedisCommand("SELECT", [RedisArgument(configuration.database)]))
                }
                guard !handshake.isEmpty else { return eventLoop.makeSucceededFuture(connection) }
                let commands = handshake
                return connection.pipeline(commands, timeout: configuration.connectTimeout).flatMapThrowing { replies in
                    for (command, reply) in zip(commands, replies) {
                        if case .error(let message) = reply {
                            channel.close(promise: nil)
                            // AUTH's error text names no secret; the command's arguments are never echoed.
                            throw RedisClientError(.connectionFailed, "\(command.name) on \(endpoint) refused: \(message)")
                        }
                    }
                    return connection
                }
            }
    }

    /// Sends several commands in one write and returns their replies in order.
    /// Server errors come back as `.error` values, not thrown: callers decide per reply.
    public func pipeline(_ commands: [RedisCommand], timeout: TimeAmount? = nil) -> EventLoopFuture<[RedisValue]> {
        let promise = channel.eventLoop.makePromise(of: [RedisValue].self)
        let request = RedisRequest(commands: commands, promise: promise, timeout: timeout ?? configuration.commandTimeout)
        // A write on a channel that has just closed fails with NIO's error; callers get the client's own.
        let endpoint = configuration.endpoint
        channel.writeAndFlush(request).whenFailure { error in
            promise.fail(error as? RedisClientError ?? RedisClientError(.connectionClosed, "connection to \(endpoint) closed: \(error)"))
        }
        return promise.futureResult
    }

    /// Sends one command; a server error reply is thrown as `RedisClientError(.server)`.
    public func send(_ command: RedisCommand, timeout: TimeAmount? = nil) -> EventLoopFuture<RedisValue> {
        pipeline([command], timeout: timeout).flatMapThrowing { replies in
            let reply = replies[0]
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: command.name) }
            return reply
        }
    }

    public func close() -> EventLoopFuture<Void> {
        channel.close().flatMapError { _ in self.channel.eventLoop.makeSucceededVoidFuture() }
    }
}
