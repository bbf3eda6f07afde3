import NIOCore
import NIOPosix

/// A TCP client that writes exactly the bytes it is given and nothing more: the slow, stalled or lying peer a
/// server on the internet meets. Tells whether the server has closed the connection.
public final class RawConnection: Sendable {
    let channel: any Channel

    private init(channel: any Channel) { self.channel = channel }

    public static func connect(port: Int, host: String = "127.0.0.1") async throws -> RawConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .connect(host: host, port: port).get()
        return RawConnection(channel: channel)
    }

    public func send(_ text: String) async throws {
        try await channel.writeAndFlush(ByteBuffer(string: text)).get()
    }

    /// Whether the server closed the connection (NIO closes the channel on the server's FIN or reset).
    public var isClosed: Bool { !channel.isActive }

    /// Waits up to `timeout` for the server to close; returns whether it did.
    public func waitClosed(timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if isClosed { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return isClosed
    }

    public func close() async { try? await channel.close().get() }
}
