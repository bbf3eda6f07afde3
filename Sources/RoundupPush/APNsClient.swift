import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
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
    private let goingAway = NIOLockedValueBox(false)
    private let lastActivity = NIOLockedValueBox(NIODeadline.now())

    init(channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer) {
        self.channel = channel
        self.multiplexer = multiplexer
    }

    var isUsable: Bool { channel.isActive && !goingAway.withLockedValue { $0 } }

    func markGoingAway() { goingAway.withLockedValue { $0 = true } }

    static func connect(
        host: String, port: Int, tls: NIOSSLContext, group: any EventLoopGroup, idlePing: TimeAmount, logger: Logger
    ) async throws -> APNsConnection {
        let serverName = host.first?.isNumber == true || host.contains(":") ? nil : host
        let box = NIOLockedValueBox<APNsConnection?>(nil)
        let (channel, multiplexer) = try await ClientBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture { () -> (any Channel, NIOHTTP2Handler.StreamMultiplexer) in
                    let ssl = try NIOSSLClientHandler(context: tls, serverHostname: serverName)
                    try channel.pipeline.syncOperations.addHandler(ssl)
                    let multiplexer = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { stream in stream.close() }  // APNs never opens streams
                    try channel.pipeline.syncOperations.addHandler(ConnectionWatcher(onGoAway: { box.withLockedValue { $0?.markGoingAway() } }))
                    return (channel, multiplexer)
                }
            }
        let connection = APNsConnection(channel: channel, multiplexer: multiplexer)
        box.withLockedValue { $0 = connection }
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
                let ping = HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: UInt64.random(in: 0...UInt64.max)), ack: false))
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
        headers.add(name: ":path", value: "/3/device/" + request.deviceToken)
        headers.add(name: "authorization", value: "bearer " + token)
        headers.add(name: "apns-topic", value: request.topic)
        headers.add(name: "apns-push-type", value: request.pushType.rawValue)
        headers.add(name: "apns-priority", value: String(request.priority))
        headers.add(name: "apns-expiration", value: String(Int(request.expiration.timeIntervalSince1970)))
        headers.add(name: "apns-id", value: request.id.uuidString.lowercased())
        if let collapse = request.collapseID { headers.add(name: "apns-collapse-id", value: collapse) }
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(request.payload.readableBytes))
        let payload = request.payload
        let sendHeaders = headers
        multiplexer.createStreamChannel { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(APNsStreamHandler(headers: sendHeaders, body: payload, promise: promise))
            }
        }.whenFailure { error in
            promise.fail(APNsError.notProcessed("stream not opened: \(error)"))
        }
        let deadline = channel.eventLoop.scheduleTask(in: timeout) {
            promise.fail(APNsError.noResponse("no answer within \(timeout.nanoseconds / 1_000_000) ms"))
        }
        defer { deadline.cancel() }
        return try await promise.futureResult.get()
    }

    func close() { channel.close(promise: nil) }
}

/// Sees connection-level frames: a GOAWAY means no new streams here.
private final class ConnectionWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    let onGoAway: @Sendable () -> Void
    init(onGoAway: @escaping @Sendable () -> Void) { self.onGoAway = onGoAway }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if case .goAway = frame.payload { onGoAway() }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        onGoAway()
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
    var status: Int?
    var apnsID: String?
    var responseBody = ByteBuffer()
    var done = false

    init(headers: HPACKHeaders, body: ByteBuffer, promise: EventLoopPromise<APNsResponse>) {
        self.headers = headers
        self.body = body
        self.promise = promise
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { write(context: context) }
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

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Closed by GOAWAY: the reason is refusedStream and the server did not process the request.
        if let closed = event as? StreamClosedEvent, !done {
            fail(closed.reason == .refusedStream ? APNsError.notProcessed("refused by GOAWAY") : APNsError.noResponse("stream closed: \(String(describing: closed.reason))"))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(APNsError.noResponse("stream closed before the response"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(APNsError.noResponse("\(error)"))
        context.close(promise: nil)
    }

    private func finish(context: ChannelHandlerContext) {
        guard !done else { return }
        done = true
        var reason: String?
        if responseBody.readableBytes > 0, let text = responseBody.getString(at: responseBody.readerIndex, length: responseBody.readableBytes),
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
    private let next = NIOLockedValueBox(0)

    public init(endpoint: Endpoint, caFile: String?, connections: Int, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                timeout: TimeAmount = .seconds(10), logger: Logger) throws {
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
    }

    private func connection() async throws -> APNsConnection {
        let index = next.withLockedValue { value -> Int in
            defer { value = (value + 1) % size }
            return value
        }
        let slot = slots[index]
        let future: EventLoopFuture<APNsConnection> = slot.withLockedValue { current in
            if let current { return current }
            let promise = group.next().makePromise(of: APNsConnection.self)
            promise.completeWithTask { [endpoint, tls, group, logger] in
                try await APNsConnection.connect(host: endpoint.host, port: endpoint.port, tls: tls, group: group, idlePing: .seconds(60), logger: logger)
            }
            current = promise.futureResult
            return promise.futureResult
        }
        do {
            let connection = try await future.get()
            if connection.isUsable { return connection }
            // Gone away: replace it (once; whoever gets here first).
            slot.withLockedValue { if $0 === future { $0 = nil } }
            connection.close()
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
        for slot in slots {
            slot.withLockedValue { future in
                future?.whenSuccess { $0.close() }
                future = nil
            }
        }
    }
}
