import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP client that writes exactly the bytes it is given and nothing more: the slow, stalled or lying peer a
/// server on the internet meets. Tells whether the server has closed the connection.
///
/// Made with `connect(port:host:options:)`, it also keeps what the server sent (`received`), may read only when asked
/// (a client that stops reading), and may end with a reset (`reset()`) instead of a close: a phone that loses its
/// network mid-response.
public final class RawConnection: Sendable {
    let channel: any Channel
    /// What the server sent, for a connection made with `Options` (nil: read and dropped).
    private let recording: Recording?

    private init(channel: any Channel, recording: Recording? = nil) {
        self.channel = channel
        self.recording = recording
    }

    public static func connect(port: Int, host: String = "127.0.0.1") async throws -> RawConnection {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .connect(host: host, port: port).get()
        return RawConnection(channel: channel)
    }

    /// How a connection made by `connect(port:host:options:)` receives.
    public struct Options: Sendable {
        /// SO_RCVBUF, set before connecting (Linux doubles it and has a floor): with a small one and `reads` off, a
        /// server's writes stall once a few KB are in flight.
        public var receiveBuffer: Int?
        /// false: nothing is read until asked (`waitReceived`, `startReading`), so the server's bytes pile up in the
        /// socket buffers: a client that never reads.
        public var reads: Bool
        /// The first bytes kept in `received`; every byte is counted (`receivedCount`) and the last ones kept
        /// (`receivedTail`).
        public var keep: Int

        public init(receiveBuffer: Int? = nil, reads: Bool = true, keep: Int = 64 * 1024) {
            self.receiveBuffer = receiveBuffer
            self.reads = reads
            self.keep = keep
        }
    }

    /// A connection that keeps what the server sends it (`received`), reading as `options` say.
    public static func connect(port: Int, host: String = "127.0.0.1", options: Options) async throws -> RawConnection {
        let recording = Recording(keep: options.keep)
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(.autoRead, value: options.reads)
        if let size = options.receiveBuffer {
            bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(size))
        }
        let channel =
            try await bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(RecordingHandler(recording)) }
            }
            .connect(host: host, port: port).get()
        return RawConnection(channel: channel, recording: recording)
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

    /// Ends the connection with a reset (SO_LINGER on, with a linger of 0, then close): the server sees an RST, as from
    /// a peer that vanished, not a FIN.
    public func reset() async {
        if let sockets = channel as? any SocketOptionProvider {
            try? await sockets.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
        }
        try? await channel.close().get()
    }

    /// Reads from now on whatever arrives (for a connection made with `reads` off): its buffers drain, and a close the
    /// server queued behind the bytes it had sent is seen.
    public func startReading() async {
        try? await channel.setOption(.autoRead, value: true).get()
    }

    /// Waits up to `timeout` until `condition` holds, asking for reads meanwhile (for a connection made with `reads`
    /// off, each wait reads what the socket holds, a buffer at a time); returns whether it held.
    public func waitReceived(timeout: Duration, until condition: (RawConnection) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(self) { return true }
            if channel.isActive { channel.read() }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(self)
    }

    /// The first bytes the server sent (`Options.keep` of them), as text; empty for a connection made without
    /// `Options`.
    public var received: String {
        guard let recording else { return "" }
        return String(decoding: recording.state.withLockedValue { $0.head }, as: UTF8.self)
    }

    /// The last bytes the server sent (up to 256), as text.
    public var receivedTail: String {
        guard let recording else { return "" }
        return String(decoding: recording.state.withLockedValue { $0.tail }, as: UTF8.self)
    }

    /// How many bytes the server sent in all.
    public var receivedCount: Int { recording?.state.withLockedValue { $0.count } ?? 0 }

    /// The status code of the response the server began with (its status line arrived), else nil.
    public var receivedStatus: Int? {
        guard let recording else { return nil }
        let line = String(decoding: recording.state.withLockedValue { $0.head.prefix(16) }, as: UTF8.self)
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 3, parts[0].hasPrefix("HTTP/1.") else { return nil }
        return Int(parts[1])
    }

    /// When the connection was seen closed (by either side), for a connection made with `Options`.
    public var closedAt: ContinuousClock.Instant? { recording?.state.withLockedValue { $0.closedAt } }
}

/// What the server sent a `RawConnection`.
final class Recording: Sendable {
    struct State {
        var head: [UInt8] = []
        var tail: [UInt8] = []
        var count = 0
        var closedAt: ContinuousClock.Instant?
    }

    static let tailSize = 256
    let keep: Int
    let state = NIOLockedValueBox(State())

    init(keep: Int) { self.keep = keep }

    func take(_ bytes: ByteBufferView) {
        let keep = self.keep
        state.withLockedValue { state in
            state.count += bytes.count
            if state.head.count < keep { state.head.append(contentsOf: bytes.prefix(keep - state.head.count)) }
            state.tail.append(contentsOf: bytes.suffix(Recording.tailSize))
            if state.tail.count > Recording.tailSize { state.tail.removeFirst(state.tail.count - Recording.tailSize) }
        }
    }

    func closed() {
        state.withLockedValue { state in
            if state.closedAt == nil { state.closedAt = ContinuousClock.now }
        }
    }
}

/// Hands what a `RawConnection` reads to its `Recording`.
final class RecordingHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let recording: Recording

    init(_ recording: Recording) { self.recording = recording }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        recording.take(Self.unwrapInboundIn(data).readableBytesView)
    }

    func channelInactive(context: ChannelHandlerContext) {
        recording.closed()
        context.fireChannelInactive()
    }
}
