import Metrics
import NIOConcurrencyHelpers
public import NIOCore
public import NIOHTTP1

/// Connection hygiene for the processes that face the internet without a proxy in front (the ingress and the API):
/// how long a client may take to send a request head and a body, how long a kept-alive connection may idle, how large
/// the head may be, and how many connections one process holds at once. docs/CONFIGURATION.md documents the keys.
public struct HTTPLimits: Sendable, Equatable {
    /// From the connection's start until its first request head is complete.
    public var headTimeoutSeconds: Int
    /// From a request's head until its body is complete.
    public var bodyTimeoutSeconds: Int
    /// From a response's end until the next request head is complete (a kept-alive connection doing nothing).
    public var idleTimeoutSeconds: Int
    /// The request line and headers together.
    public var maxHeaderBytes: Int
    public var maxConnections: Int
    /// While a response is being written: the longest the server waits for the client to take any of its bytes (a
    /// write handed to the socket) before it closes the connection. A client that stops reading holds a response's
    /// memory this long at most.
    public var writeTimeoutSeconds: Int

    public init(
        headTimeoutSeconds: Int = 10, bodyTimeoutSeconds: Int = 30, idleTimeoutSeconds: Int = 60, maxHeaderBytes: Int = 16_384,
        maxConnections: Int = 4096, writeTimeoutSeconds: Int = 30
    ) {
        self.writeTimeoutSeconds = writeTimeoutSeconds
        self.headTimeoutSeconds = headTimeoutSeconds
        self.bodyTimeoutSeconds = bodyTimeoutSeconds
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.maxHeaderBytes = maxHeaderBytes
        self.maxConnections = maxConnections
    }

    public var headTimeout: TimeAmount { .seconds(Int64(headTimeoutSeconds)) }
    public var bodyTimeout: TimeAmount { .seconds(Int64(bodyTimeoutSeconds)) }
    public var idleTimeout: TimeAmount { .seconds(Int64(idleTimeoutSeconds)) }
    public var writeTimeout: TimeAmount { .seconds(Int64(writeTimeoutSeconds)) }

    /// NIO's HTTP/1 decoder limits for these settings (one header field may use the whole budget).
    public var decoderLimits: NIOHTTPDecoderLimitConfiguration {
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = maxHeaderBytes
        limits.maxHeaderListSize = maxHeaderBytes
        limits.maxHeaderFieldCount = 100
        return limits
    }
}

/// Where a request part stands in its request, so `HTTPDeadlineHandler` can work on NIO's HTTP/1 parts and on
/// the HTTP-types parts Hummingbird uses alike.
public enum HTTPMessagePhase: Sendable {
    case head, body, end
}

public protocol HTTPDeadlineInbound {
    var deadlinePhase: HTTPMessagePhase { get }
}

public protocol HTTPDeadlineOutbound {
    var endsMessage: Bool { get }
}

extension HTTPPart: HTTPDeadlineInbound, HTTPDeadlineOutbound {
    public var deadlinePhase: HTTPMessagePhase {
        switch self {
        case .head: .head
        case .body: .body
        case .end: .end
        }
    }

    public var endsMessage: Bool {
        if case .end = self { return true }
        return false
    }
}

/// What a connection's client is expected to send next.
private enum ClientPhase: String {
    case head, body, idle
}

/// Closes a connection whose client is too slow: no complete request head within `headTimeout` of connecting (or
/// `idleTimeout` of the previous response), no complete body within `bodyTimeout` of its head, and (with
/// `writeDeadlines`) a response none of whose pending writes reached the socket within `writeTimeout` (a client that
/// stops reading fills the socket's buffer, then the writer's, and is closed instead of holding them; responses are
/// written whole up to 256 KiB and in 64 KiB pieces beyond, so a slow client that keeps taking bytes is not) or whose sent bytes stay
/// unacknowledged that long (`TCP_USER_TIMEOUT`: a peer that vanished without a word). While the server itself works on a request no client deadline runs: the handlers have their own.
/// Sits after the HTTP decoder.
public final class HTTPDeadlineHandler<Inbound: HTTPDeadlineInbound, Outbound: HTTPDeadlineOutbound>: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = Inbound
    public typealias InboundOut = Inbound
    public typealias OutboundIn = Outbound
    public typealias OutboundOut = Outbound

    private let limits: HTTPLimits
    private let server: String
    /// One timer per connection, not one per phase: a phase only moves `deadline`, and the timer, when it fires, closes
    /// the connection if the deadline has passed or sets itself again. It is never further away than the shortest
    /// timeout, so a new phase never has to move it earlier (setting and cancelling a timer for each request's phases
    /// cost the ingress instructions on every webhook).
    private var timer: Scheduled<Void>?
    /// When the current phase's time runs out; nil while it is the server's turn.
    private var deadline: NIODeadline?
    private var phase = ClientPhase.head
    private var armed = false
    /// Whether the current request has been answered already (a server may answer before the body is complete).
    private var responded = false
    /// Whether writes are watched (`writeTimeout`).
    private let writeDeadlines: Bool
    /// Writes handed to the channel and not yet to the socket.
    private var pendingWrites = 0
    /// Until when the oldest pending write may wait without any write reaching the socket; nil with none pending.
    private var writeDeadline: NIODeadline?

    /// `writeDeadlines`: close a connection whose pending writes make no progress for `limits.writeTimeout` (one promise
    /// per write: the API's responses, not the ingress's few bytes).
    public init(limits: HTTPLimits, server: String, writeDeadlines: Bool = false) {
        self.limits = limits
        self.server = server
        self.writeDeadlines = writeDeadlines
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive {
            arm(.head, context: context)
            limitUnacknowledged(context: context)
        }
    }

    public func channelActive(context: ChannelHandlerContext) {
        if !armed {
            arm(.head, context: context)
            limitUnacknowledged(context: context)
        }
        context.fireChannelActive()
    }

    /// With write deadlines, the kernel drops the connection when what it sent stays unacknowledged for `writeTimeout`
    /// (`TCP_USER_TIMEOUT`): a peer that vanished without a word (a phone out of coverage) is closed after that long,
    /// not after TCP's own quarter of an hour, even while the few bytes of a stream's heartbeats still fit its buffers.
    private func limitUnacknowledged(context: ChannelHandlerContext) {
        guard writeDeadlines else { return }
        #if os(Linux)
        let userTimeout = NIOBSDSocket.Option(rawValue: 18)  // TCP_USER_TIMEOUT, in milliseconds
        let milliseconds = Int32(clamping: limits.writeTimeoutSeconds * 1000)
        context.channel.setOption(ChannelOptions.tcpOption(userTimeout), value: SocketOptionValue(milliseconds)).whenComplete { _ in }
        #endif
    }

    public func channelInactive(context: ChannelHandlerContext) {
        stopTimer()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        stopTimer()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data).deadlinePhase {
        case .head:
            responded = false
            arm(.body, context: context)
        case .body: break
        case .end:
            // The server's turn; or, when it has answered already, the client's next request.
            if responded { arm(.idle, context: context) } else { deadline = nil }
        }
        context.fireChannelRead(data)
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if unwrapOutboundIn(data).endsMessage {
            // The response is complete: the client has `idleTimeout` to send its next request head.
            responded = true
            arm(.idle, context: context)
        }
        guard writeDeadlines else { return context.write(data, promise: promise) }
        let written = promise ?? context.eventLoop.makePromise(of: Void.self)
        if pendingWrites == 0 { writeDeadline = .now() + limits.writeTimeout }
        pendingWrites += 1
        if timer == nil { setTimer(at: min(writeDeadline ?? .now() + limits.writeTimeout, .now() + shortestTimeout), context: context) }
        written.futureResult.hop(to: context.eventLoop).assumeIsolated().whenComplete { _ in
            // A write reached the socket (or failed with the connection): the next pending one has its own time.
            self.pendingWrites -= 1
            self.writeDeadline = self.pendingWrites == 0 ? nil : .now() + self.limits.writeTimeout
        }
        context.write(data, promise: written)
    }

    private func arm(_ phase: ClientPhase, context: ChannelHandlerContext) {
        armed = true
        self.phase = phase
        let timeout =
            switch phase {
            case .head: limits.headTimeout
            case .body: limits.bodyTimeout
            case .idle: limits.idleTimeout
            }
        let now = NIODeadline.now()
        let at = now + timeout
        deadline = at
        if timer == nil { setTimer(at: min(at, now + shortestTimeout), context: context) }
    }

    private var shortestTimeout: TimeAmount {
        let client = min(limits.headTimeout, limits.bodyTimeout, limits.idleTimeout)
        return writeDeadlines ? min(client, limits.writeTimeout) : client
    }

    private func setTimer(at when: NIODeadline, context: ChannelHandlerContext) {
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: when) {
            self.timer = nil
            self.timerFired(context: context)
        }
    }

    private func timerFired(context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        if let writeDeadline, writeDeadline <= now {
            // A client that takes none of the response: closed, so its buffers and its handler's memory are freed.
            Counter(label: "roundup_http_connections_closed_total", dimensions: [("server", server), ("reason", "write_timeout")]).increment()
            context.close(promise: nil)
            return
        }
        // Neither the client's turn nor a write pending: the next phase or write sets a timer again.
        guard let next = [deadline, writeDeadline].compactMap({ $0 }).min() else { return }
        if let deadline, deadline <= now {
            // A stalled client: the server closes, so it holds neither a file descriptor nor a buffer for it.
            Counter(label: "roundup_http_connections_closed_total", dimensions: [("server", server), ("reason", phase.rawValue + "_timeout")])
                .increment()
            context.close(promise: nil)
        } else {
            setTimer(at: min(next, now + shortestTimeout), context: context)
        }
    }

    private func stopTimer() {
        timer?.cancel()
        timer = nil
        deadline = nil
        writeDeadline = nil
    }
}

/// Caps the connections a server holds at once: past `limit`, a new connection is closed as soon as it is accepted
/// (its client sees a reset and tries again), so a flood of idle sockets cannot exhaust file descriptors or memory.
/// Add it to the server channel's pipeline.
public final class ConnectionLimitHandler: ChannelInboundHandler, Sendable {
    public typealias InboundIn = any Channel
    public typealias InboundOut = any Channel

    private let limit: Int
    private let server: String
    private let open = NIOLockedValueBox(0)

    public init(limit: Int, server: String) {
        self.limit = limit
        self.server = server
    }

    public var openConnections: Int { open.withLockedValue { $0 } }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = unwrapInboundIn(data)
        let admitted = open.withLockedValue { count -> Bool in
            guard count < limit else { return false }
            count += 1
            return true
        }
        guard admitted else {
            Counter(label: "roundup_http_connections_closed_total", dimensions: [("server", server), ("reason", "over_limit")]).increment()
            child.close(promise: nil)
            return
        }
        child.closeFuture.whenComplete { [open] _ in open.withLockedValue { $0 -= 1 } }
        context.fireChannelRead(data)
    }
}
