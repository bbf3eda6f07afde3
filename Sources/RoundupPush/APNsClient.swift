public import Foundation
public import Logging
import NIOConcurrencyHelpers
public import NIOCore
import NIOHPACK
import NIOHTTP2
public import NIOPosix
import NIOSSL

/// One notification for one device token.
public struct APNsRequest: Sendable {
    public enum PushType: String, Sendable {
        case background
        case alert
    }

    public var deviceToken: String
    public var topic: String
    public var pushType: PushType
    public var payload: ByteBuffer
    public var expiration: Date
    public var collapseID: String?
    /// Sent as `apns-id`; kept across retries, so a push is recognisable in APNs' logs.
    public var id: UUID = UUID()

    public var priority: Int { pushType == .background ? 5 : 10 }

    public init(deviceToken: String, topic: String, pushType: PushType, payload: ByteBuffer, expiration: Date, collapseID: String? = nil) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.payload = payload
        self.expiration = expiration
        self.collapseID = collapseID
    }
}

public struct APNsResponse: Sendable, Equatable {
    public var status: Int
    /// APNs' `reason` (`Unregistered`, `BadDeviceToken`, …); nil on success.
    public var reason: String?
    public var apnsID: String?
}

public enum APNsError: Error, Sendable, CustomStringConvertible {
    /// APNs did not process the request (refused by GOAWAY, or the stream could not be opened): safe to send again.
    case notProcessed(String)
    /// No answer in time, or the connection broke mid-request: APNs may or may not have it.
    case noResponse(String)

    public var description: String {
        switch self {
        case .notProcessed(let why): return "not processed: \(why)"
        case .noResponse(let why): return "no response: \(why)"
        }
    }
}

/// One HTTP/2 connection to APNs over TLS (ALPN `h2`), many concurrent streams on it. NIOHTTP2 holds back new
/// streams beyond the server's `MAX_CONCURRENT_STREAMS` until earlier ones close. After a GOAWAY the connection takes
/// no new streams; streams the server did not process fail with `notProcessed`.
final class APNsConnection: Sendable {
    let channel: any Channel
    let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    /// Set by a GOAWAY (with its last stream id), a closed connection, or a request that got no answer in time.
    let goAway: GoAwayState
    private let lastActivity = NIOLockedValueBox(NIODeadline.now())

    init(channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer, goAway: GoAwayState) {
        self.channel = channel
        self.multiplexer = multiplexer
        self.goAway = goAway
    }

    var isUsable: Bool { channel.isActive && !goAway.isGoingAway }

    func markGoingAway() { goAway.mark(lastStreamID: nil) }

    static func connect(
        host: String, port: Int, tls: NIOSSLContext, group: any EventLoopGroup, idlePing: TimeAmount, logger: Logger
    ) async throws -> APNsConnection {
        let serverName = host.first?.isNumber == true || host.contains(":") ? nil : host
        let goAway = GoAwayState()
        let (channel, multiplexer) = try await ClientBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture { () -> (any Channel, NIOHTTP2Handler.StreamMultiplexer) in
                    let ssl = try NIOSSLClientHandler(context: tls, serverHostname: serverName)
                    try channel.pipeline.syncOperations.addHandler(ssl)
                    try channel.pipeline.syncOperations.addHandler(FlushCoalescer())
                    let multiplexer = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { stream in stream.close() }  // APNs never opens streams
                    try channel.pipeline.syncOperations.addHandler(ConnectionWatcher(goAway: goAway))
                    return (channel, multiplexer)
                }
            }
        let connection = APNsConnection(channel: channel, multiplexer: multiplexer, goAway: goAway)
        connection.schedulePing(every: idlePing)
        logger.info("apns connected", metadata: ["host": "\(host)", "port": "\(port)"])
        return connection
    }

    /// PING an idle connection now and then, so middleboxes and APNs keep it open.
    private func schedulePing(every interval: TimeAmount) {
        channel.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [weak self] task in
            guard let self, self.channel.isActive else {
                task.cancel()
                return
            }
            if NIODeadline.now() - self.lastActivity.withLockedValue({ $0 }) >= interval {
                let ping = HTTP2Frame(
                    streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: UInt64.random(in: 0...UInt64.max)), ack: false))
                self.channel.writeAndFlush(ping, promise: nil)
            }
        }
    }

    func send(_ request: APNsRequest, host: String, token: String, timeout: TimeAmount) async throws -> APNsResponse {
        lastActivity.withLockedValue { $0 = .now() }
        let promise = channel.eventLoop.makePromise(of: APNsResponse.self)
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: host)
        // Values that repeat from push to push (the token, for an hour; the topic; the type) go into HPACK's dynamic
        // table and are sent as an index after the first time. Values that are new with every push (the id, the
        // device's path, the expiration second) are sent literally and kept out of it: indexing them would only evict
        // the repeating ones, and every header's lookup scans the whole table (8.6% of the pusher's instructions per push
        // went with it; docs/BENCHMARKS.md, issue 19).
        headers.add(name: ":path", value: "/3/device/" + request.deviceToken, indexing: .nonIndexable)
        headers.add(name: "authorization", value: "bearer " + token)
        headers.add(name: "apns-topic", value: request.topic)
        headers.add(name: "apns-push-type", value: request.pushType.rawValue)
        headers.add(name: "apns-priority", value: request.priority == 5 ? "5" : "10")
        headers.add(name: "apns-expiration", value: String(Int(request.expiration.timeIntervalSince1970)), indexing: .nonIndexable)
        headers.add(name: "apns-id", value: request.id.uuidString.lowercased(), indexing: .nonIndexable)
        if let collapse = request.collapseID { headers.add(name: "apns-collapse-id", value: collapse, indexing: .nonIndexable) }
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(request.payload.readableBytes))
        let payload = request.payload
        let sendHeaders = headers
        let goAway = self.goAway
        multiplexer.createStreamChannel { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(
                    APNsStreamHandler(headers: sendHeaders, body: payload, promise: promise, timeout: timeout, goAway: goAway))
            }
        }.whenFailure { error in
            promise.fail(APNsError.notProcessed("stream not opened: \(error)"))
        }
        do {
            return try await promise.futureResult.get()
        } catch APNsError.noResponse(let why) where why.hasPrefix("no answer within") {
            // A connection that stops answering is replaced (PINGs alone would take minutes to tell).
            markGoingAway()
            throw APNsError.noResponse(why)
        }
    }

    func close() { channel.close(promise: nil) }
}

/// Every stream's request is flushed on its own (NIOHTTP2 flushes the connection per stream outside a read), which
/// costs a TLS record and a write per push. This defers the connection's flush to the end of the event loop's current
/// batch of tasks, so a burst of pushes leaves in one write.
private final class FlushCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private var scheduled = false

    func flush(context: ChannelHandlerContext) {
        guard !scheduled else { return }
        scheduled = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = loopBound.value
            handler.scheduled = false
            context.flush()
        }
    }
}

/// Whether a connection is going away, and the last stream the server said it processes (GOAWAY's lastStreamID).
final class GoAwayState: Sendable {
    private let state = NIOLockedValueBox<(goingAway: Bool, lastStreamID: Int?)>((false, nil))
    var isGoingAway: Bool { state.withLockedValue { $0.goingAway } }
    var lastStreamID: Int? { state.withLockedValue { $0.lastStreamID } }
    func mark(lastStreamID: Int?) {
        state.withLockedValue { value in
            value.goingAway = true
            if let lastStreamID { value.lastStreamID = min(value.lastStreamID ?? Int.max, lastStreamID) }
        }
    }
}

/// Sees connection-level frames: a GOAWAY means no new streams here, and streams above its last id were not processed.
private final class ConnectionWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    let goAway: GoAwayState
    init(goAway: GoAwayState) { self.goAway = goAway }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if case .goAway(let last, _, _) = frame.payload { goAway.mark(lastStreamID: Int(last)) }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        goAway.mark(lastStreamID: nil)
        context.fireChannelInactive()
    }
}

/// One request on one stream: writes HEADERS and DATA, collects the response's status, `apns-id` and reason.
private final class APNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    let headers: HPACKHeaders
    let body: ByteBuffer
    let promise: EventLoopPromise<APNsResponse>
    let timeout: TimeAmount
    let goAway: GoAwayState
    var status: Int?
    var apnsID: String?
    var responseBody = ByteBuffer()
    var done = false
    var deadline: Scheduled<Void>?

    init(headers: HPACKHeaders, body: ByteBuffer, promise: EventLoopPromise<APNsResponse>, timeout: TimeAmount, goAway: GoAwayState) {
        self.headers = headers
        self.body = body
        self.promise = promise
        self.timeout = timeout
        self.goAway = goAway
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // The deadline closes the stream too (RST_STREAM, or dropped while still queued), so a request that timed
        // out cannot still reach APNs after we have moved on and retried it.
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            guard !handler.done else { return }
            handler.fail(.noResponse("no answer within \(handler.timeout.nanoseconds / 1_000_000) ms"))
            context.close(promise: nil)
        }
        if context.channel.isActive { write(context: context) }
    }

    /// A stream that closed without an answer was not processed if it never got an id, or its id is above the last one
    /// a GOAWAY promised to process.
    private func closedWithoutAnswer(_ context: ChannelHandlerContext, _ why: String) -> APNsError {
        let id = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)).map { Int($0) }
        if id == nil { return .notProcessed("\(why) before the stream opened") }
        if let last = goAway.lastStreamID, let id, id > last { return .notProcessed("refused by GOAWAY (stream \(id) > \(last))") }
        return .noResponse(why)
    }

    func channelActive(context: ChannelHandlerContext) {
        write(context: context)
        context.fireChannelActive()
    }

    private var written = false

    private func write(context: ChannelHandlerContext) {
        guard !written else { return }
        written = true
        context.write(wrapOutboundOut(.headers(.init(headers: headers, endStream: false))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.data(.init(data: .byteBuffer(body), endStream: true))), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let block):
            if let code = block.headers.first(name: ":status").flatMap(Int.init) { status = code }
            if let id = block.headers.first(name: "apns-id") { apnsID = id }
            if block.endStream { finish(context: context) }
        case .data(let block):
            if case .byteBuffer(var bytes) = block.data { responseBody.writeBuffer(&bytes) }
            if block.endStream { finish(context: context) }
        case .rstStream(let code):
            fail(code == .refusedStream ? APNsError.notProcessed("stream refused") : APNsError.noResponse("stream reset: \(code)"))
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done { fail(closedWithoutAnswer(context, "stream closed before the response")) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !done {
            if let closed = error as? NIOHTTP2Errors.StreamClosed, closed.errorCode == .refusedStream {
                fail(.notProcessed("stream refused"))
            } else {
                fail(closedWithoutAnswer(context, "\(error)"))
            }
        }
        context.close(promise: nil)
    }

    private func finish(context: ChannelHandlerContext) {
        guard !done else { return }
        done = true
        deadline?.cancel()
        var reason: String?
        // Only an error carries a reason (APNs answers 200 with no body).
        if status != 200, responseBody.readableBytes > 0,
            let text = responseBody.getString(at: responseBody.readerIndex, length: responseBody.readableBytes),
            let range = text.range(of: #""reason":""#)
        {
            let rest = text[range.upperBound...]
            reason = rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
        }
        promise.succeed(APNsResponse(status: status ?? 0, reason: reason, apnsID: apnsID))
    }

    private func fail(_ error: APNsError) {
        guard !done else { return }
        done = true
        deadline?.cancel()
        promise.fail(error)
    }
}

/// A small pool of long-lived connections to one APNs endpoint, used round-robin; a connection that went away
/// (GOAWAY, closed) is replaced on next use.
public final class APNsClient: Sendable {
    public struct Endpoint: Sendable {
        public var host: String
        public var port: Int
        public init(url: String) throws {
            guard let components = URLComponents(string: url), components.scheme == "https", let host = components.host else {
                throw APNsError.notProcessed("bad APNs URL \(url)")
            }
            self.host = host
            self.port = components.port ?? 443
        }
    }

    let endpoint: Endpoint
    let tls: NIOSSLContext
    let group: any EventLoopGroup
    let size: Int
    let timeout: TimeAmount
    let logger: Logger
    private let slots: [NIOLockedValueBox<EventLoopFuture<APNsConnection>?>]
    /// The connected connection of each slot, so the common case takes no hop through a future.
    private let ready: [NIOLockedValueBox<APNsConnection?>]
    private let next = NIOLockedValueBox(0)

    public init(
        endpoint: Endpoint, caFile: String?, connections: Int, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        timeout: TimeAmount = .seconds(10), logger: Logger
    ) throws {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.applicationProtocols = ["h2"]
        if let caFile { configuration.additionalTrustRoots = [.file(caFile)] }
        self.tls = try NIOSSLContext(configuration: configuration)
        self.endpoint = endpoint
        self.group = group
        self.size = max(1, connections)
        self.timeout = timeout
        self.logger = logger
        self.slots = (0..<max(1, connections)).map { _ in NIOLockedValueBox(nil) }
        self.ready = (0..<max(1, connections)).map { _ in NIOLockedValueBox(nil) }
    }

    private func connection() async throws -> APNsConnection {
        let index = next.withLockedValue { value -> Int in
            defer { value = (value + 1) % size }
            return value
        }
        if let connection = ready[index].withLockedValue({ $0 }), connection.isUsable { return connection }
        let slot = slots[index]
        let future: EventLoopFuture<APNsConnection> = slot.withLockedValue { current in
            if let current { return current }
            let promise = group.next().makePromise(of: APNsConnection.self)
            promise.completeWithTask { [endpoint, tls, group, logger] in
                try await APNsConnection.connect(
                    host: endpoint.host, port: endpoint.port, tls: tls, group: group, idlePing: .seconds(60), logger: logger)
            }
            current = promise.futureResult
            return promise.futureResult
        }
        do {
            let connection = try await future.get()
            if connection.isUsable {
                ready[index].withLockedValue { $0 = connection }
                return connection
            }
            ready[index].withLockedValue { if $0 === connection { $0 = nil } }
            // Gone away: replace it (once; whoever gets here first). Not closed at once: after a GOAWAY the server is
            // still answering the streams it kept; it closes the connection itself, or we do once those had their time.
            slot.withLockedValue { if $0 === future { $0 = nil } }
            let channel = connection.channel
            channel.eventLoop.scheduleTask(in: timeout + .seconds(1)) { channel.close(promise: nil) }
            return try await self.connection()
        } catch {
            slot.withLockedValue { if $0 === future { $0 = nil } }
            throw APNsError.notProcessed("cannot connect to \(endpoint.host):\(endpoint.port): \(error)")
        }
    }

    /// Sends once (no retry here: the caller decides by the outcome).
    public func send(_ request: APNsRequest, token: String) async throws -> APNsResponse {
        let connection = try await connection()
        return try await connection.send(request, host: endpoint.host, token: token, timeout: timeout)
    }

    public func shutdown() {
        for box in ready { box.withLockedValue { $0 = nil } }
        for slot in slots {
            slot.withLockedValue { future in
                future?.whenSuccess { $0.close() }
                future = nil
            }
        }
    }
}
