public import Foundation
public import Logging
import NIOConcurrencyHelpers
public import NIOCore
import NIOHPACK
import NIOHTTP2
public import NIOPosix
import NIOSSL
import RoundupCore

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
    case noResponse(NoResponse)

    /// Why a request sent got no answer.
    public enum NoResponse: Sendable, Equatable, CustomStringConvertible {
        /// Nothing within the request's timeout: the connection has stopped answering.
        case timedOut(milliseconds: Int64)
        /// APNs reset the stream (its HTTP/2 error code).
        case streamReset(String)
        /// The stream closed before the response.
        case closedEarly
        /// The stream failed (its error).
        case streamFailed(String)

        public var isTimeout: Bool {
            if case .timedOut = self { return true }
            return false
        }

        public var description: String {
            switch self {
            case .timedOut(let ms): return "no answer within \(ms) ms"
            case .streamReset(let code): return "stream reset: \(code)"
            case .closedEarly: return "stream closed before the response"
            case .streamFailed(let error): return error
            }
        }
    }

    public var description: String {
        switch self {
        case .notProcessed(let why): return "not processed: \(why)"
        case .noResponse(let why): return "no response: \(why)"
        }
    }
}

/// One HTTP/2 connection to APNs over TLS (ALPN `h2`), many concurrent streams on it, without a channel per stream:
/// pushes are queued, and one task on the connection's event loop takes every push queued so far, opens a stream for
/// each (HEADERS and DATA frames on a stream id of its own) and flushes them together; answers are matched to pushes by
/// stream id (`APNsStreams`). NIOHTTP2 holds back new streams beyond the server's `MAX_CONCURRENT_STREAMS` until
/// earlier ones close. After a GOAWAY the connection takes no new streams; streams the server did not process fail with
/// `notProcessed`. (A child channel, a task and a timer per push cost half the pusher's instructions.)
final class APNsConnection: Sendable {
    let channel: any Channel
    /// Set by a GOAWAY (with its last stream id), a closed connection, or a request that got no answer in time.
    let goAway: GoAwayState
    private let streams: NIOLoopBound<APNsStreams>
    private let lastActivity = NIOLockedValueBox(NIODeadline.now())
    /// Pushes waiting for the event loop, and whether a task to write them is already on its way.
    private let queue = NIOLockedValueBox<(pushes: [APNsStreams.Push], scheduled: Bool)>(([], false))

    private init(channel: any Channel, streams: APNsStreams, goAway: GoAwayState) {
        self.channel = channel
        self.streams = NIOLoopBound(streams, eventLoop: channel.eventLoop)
        self.goAway = goAway
    }

    var isUsable: Bool { channel.isActive && !goAway.isGoingAway }

    func markGoingAway() { goAway.mark(lastStreamID: nil) }

    static func connect(
        host: String, port: Int, tls: NIOSSLContext, group: any EventLoopGroup, idlePing: TimeAmount, logger: Logger
    ) async throws -> APNsConnection {
        let serverName = host.first?.isNumber == true || host.contains(":") ? nil : host
        let goAway = GoAwayState()
        let connection = try await ClientBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture { () -> APNsConnection in
                    let ssl = try NIOSSLClientHandler(context: tls, serverHostname: serverName)
                    try channel.pipeline.syncOperations.addHandler(ssl)
                    try channel.pipeline.syncOperations.addHandler(FlushCoalescer())
                    // No stream multiplexer: frames of every stream pass through this one pipeline. Header blocks are
                    // not validated again on every push: each value sent is a constant, the configuration's, our own
                    // (ids, times, the JWT) or a device token checked as hex when the device registered; and of an
                    // answer only `:status` and `apns-id` are read. The validation was a large share of a push's instructions
                    // (docs/BENCHMARKS.md). The tests' fake APNs (`FakeAPNs`) validates every header block it receives.
                    try channel.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .client, headerBlockValidation: .disabled))
                    let streams = APNsStreams(goAway: goAway)
                    try channel.pipeline.syncOperations.addHandler(streams)
                    return APNsConnection(channel: channel, streams: streams, goAway: goAway)
                }
            }
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
        let push = APNsStreams.Push(
            headers: Self.headers(request, host: host, token: token), body: request.payload, promise: promise, timeout: timeout)
        let schedule = queue.withLockedValue { queue -> Bool in
            queue.pushes.append(push)
            defer { queue.scheduled = true }
            return !queue.scheduled
        }
        if schedule {
            channel.eventLoop.execute { [self] in
                let pushes = queue.withLockedValue { queue -> [APNsStreams.Push] in
                    queue.scheduled = false
                    defer { queue.pushes.removeAll(keepingCapacity: true) }
                    return queue.pushes
                }
                streams.value.open(pushes)
            }
        }
        do {
            return try await promise.futureResult.get()
        } catch APNsError.noResponse(let why) where why.isTimeout {
            // A connection that stops answering is replaced (PINGs alone would take minutes to tell).
            markGoingAway()
            throw APNsError.noResponse(why)
        }
    }

    static func headers(_ request: APNsRequest, host: String, token: String) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: host)
        // Values that repeat from push to push (the token, for an hour; the topic; the type) go into HPACK's dynamic
        // table and are sent as an index after the first time. Values that are new with every push (the id, the
        // device's path, the expiration second) are sent literally and kept out of it: indexing them would only evict
        // the repeating ones, and every header's lookup scans the whole table (docs/BENCHMARKS.md).
        headers.add(name: ":path", value: "/3/device/" + request.deviceToken, indexing: .nonIndexable)
        headers.add(name: "authorization", value: "bearer " + token)
        headers.add(name: "apns-topic", value: request.topic)
        headers.add(name: "apns-push-type", value: request.pushType.rawValue)
        headers.add(name: "apns-priority", value: request.priority == 5 ? "5" : "10")
        headers.add(name: "apns-expiration", value: String(Int(request.expiration.timeIntervalSince1970)), indexing: .nonIndexable)
        headers.add(name: "apns-id", value: Hex.lowercase(request.id), indexing: .nonIndexable)
        if let collapse = request.collapseID { headers.add(name: "apns-collapse-id", value: collapse, indexing: .nonIndexable) }
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(request.payload.readableBytes))
        return headers
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

/// Every stream of one connection, on its event loop: opens a stream per push (HEADERS, then DATA ending the stream),
/// matches the answer's frames to it by stream id, and fails what cannot be answered any more — with `notProcessed`
/// when APNs cannot have it (never sent, refused, above a GOAWAY's last stream id), `noResponse` otherwise. One timer
/// per connection, set for the earliest deadline, times streams out; a timed-out stream is reset, so it cannot still
/// reach APNs after we have moved on and retried it.
final class APNsStreams: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    struct Push {
        var headers: HPACKHeaders
        var body: ByteBuffer
        var promise: EventLoopPromise<APNsResponse>
        var timeout: TimeAmount
    }

    private struct Stream {
        var promise: EventLoopPromise<APNsResponse>
        var deadline: NIODeadline
        var timeout: TimeAmount
        /// Its frames left for the server (NIOHTTP2 may hold a stream back while the server's concurrency is used up).
        var sent = false
        var status: Int?
        var apnsID: String?
        var body: ByteBuffer?
    }

    private let goAway: GoAwayState
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var nextStreamID = 1
    private var timer: Scheduled<Void>?
    private var timerDeadline: NIODeadline?
    /// Bytes of DATA received and not yet given back to the connection's receive window.
    private var unreturnedBytes = 0
    private var needsFlush = false

    init(goAway: GoAwayState) { self.goAway = goAway }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        failAll { _ in .notProcessed("connection removed") }
        self.context = nil
    }

    /// Opens a stream for each push and flushes once.
    func open(_ pushes: [Push]) {
        guard let context, context.channel.isActive, !goAway.isGoingAway else {
            for push in pushes { push.promise.fail(APNsError.notProcessed("connection going away")) }
            return
        }
        let now = NIODeadline.now()
        for push in pushes {
            // Client stream ids are odd and below 2^31; a connection that used them all up goes away.
            guard nextStreamID < Int(Int32.max) else {
                goAway.mark(lastStreamID: nil)
                push.promise.fail(APNsError.notProcessed("connection out of stream ids"))
                continue
            }
            let id = HTTP2StreamID(nextStreamID)
            nextStreamID += 2
            streams[id] = Stream(promise: push.promise, deadline: now + push.timeout, timeout: push.timeout)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: push.headers, endStream: false)))), promise: nil)
            let written = context.eventLoop.makePromise(of: Void.self)
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(push.body), endStream: true)))), promise: written)
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            written.futureResult.whenComplete { result in
                let this = loopBound.value
                switch result {
                case .success: this.streams[id]?.sent = true
                case .failure(let error): this.fail(id, .notProcessed("stream not opened: \(error)"))
                }
            }
            armTimer(for: now + push.timeout)
        }
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let block):
            guard streams[frame.streamID] != nil else { return }
            if let code = block.headers.first(name: ":status").flatMap(Int.init) { streams[frame.streamID]?.status = code }
            if let id = block.headers.first(name: "apns-id") { streams[frame.streamID]?.apnsID = id }
            if block.endStream { finish(frame.streamID) }
        case .data(let block):
            // Without a stream multiplexer nobody else gives the connection's receive window back: every answer's body
            // (an error's reason; nghttpd echoes every upload) uses it up, and once its 64 KB are gone APNs can send
            // no more answers. Returned in one WINDOW_UPDATE per half window.
            unreturnedBytes += block.data.readableBytes + (block.paddingBytes ?? 0)
            if unreturnedBytes >= 32_768 {
                context.write(
                    wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unreturnedBytes))), promise: nil)
                unreturnedBytes = 0
                needsFlush = true
            }
            guard streams[frame.streamID] != nil else { return }
            // Only an error carries a body (its reason); APNs answers 200 with none.
            if streams[frame.streamID]?.status != 200, case .byteBuffer(var bytes) = block.data {
                streams[frame.streamID]?.body.setOrWriteBuffer(&bytes)
            }
            if block.endStream { finish(frame.streamID) }
        case .rstStream(let code):
            fail(frame.streamID, code == .refusedStream ? .notProcessed("stream refused") : .noResponse(.streamReset("\(code)")))
        case .goAway(let last, _, _):
            goAway.mark(lastStreamID: Int(last))
            for id in streams.keys where id > last {
                fail(id, .notProcessed("refused by GOAWAY (stream \(id) > \(last))"))
            }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        goAway.mark(lastStreamID: nil)
        failAll { stream in
            stream.sent ? .noResponse(.closedEarly) : .notProcessed("stream closed before the stream opened")
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream's own error (NIOHTTP2 names the stream): that stream fails; the connection carries on.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            fail(streamError.streamID, .noResponse(.streamFailed("\(streamError.baseError)")))
            return
        }
        context.close(promise: nil)
    }

    private func finish(_ id: HTTP2StreamID) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        var reason: String?
        if var body = stream.body, let text = body.readString(length: body.readableBytes), let range = text.range(of: #""reason":""#) {
            let rest = text[range.upperBound...]
            reason = rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
        }
        stream.promise.succeed(APNsResponse(status: stream.status ?? 0, reason: reason, apnsID: stream.apnsID))
    }

    private func fail(_ id: HTTP2StreamID, _ error: APNsError) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        stream.promise.fail(error)
    }

    private func failAll(_ error: (Stream) -> APNsError) {
        let all = streams
        streams.removeAll()
        for stream in all.values { stream.promise.fail(error(stream)) }
        timer?.cancel()
        timer = nil
        timerDeadline = nil
    }

    /// One timer per connection, at the earliest deadline of its open streams.
    private func armTimer(for deadline: NIODeadline) {
        guard let context, timerDeadline.map({ deadline < $0 }) ?? true else { return }
        timer?.cancel()
        timerDeadline = deadline
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: deadline) { loopBound.value.expire() }
    }

    private func expire() {
        timer = nil
        timerDeadline = nil
        let now = NIODeadline.now()
        var next: NIODeadline?
        for (id, stream) in streams {
            if stream.deadline <= now {
                fail(id, .noResponse(.timedOut(milliseconds: stream.timeout.nanoseconds / 1_000_000)))
                context?.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))), promise: nil)
            } else {
                next = min(next ?? stream.deadline, stream.deadline)
            }
        }
        if let next { armTimer(for: next) }
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
