public import Logging
public import NIOCore
public import NIOHTTP1
public import NIOPosix
public import ServiceLifecycle

/// A request as `SimpleHTTPServer` hands it to its handler: head and the whole body.
public struct SimpleHTTPRequest: Sendable {
    public var method: HTTPMethod
    public var uri: String
    public var headers: HTTPHeaders
    public var body: ByteBuffer

    public var path: Substring { uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "" }
    public var query: Substring? {
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        return parts.count == 2 ? parts[1] : nil
    }
}

public struct SimpleHTTPResponse: Sendable {
    public var status: HTTPResponseStatus
    public var headers: HTTPHeaders
    public var body: ByteBuffer

    public init(status: HTTPResponseStatus, headers: HTTPHeaders = [:], body: ByteBuffer = ByteBuffer()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func json(_ status: HTTPResponseStatus, _ text: String) -> SimpleHTTPResponse {
        SimpleHTTPResponse(status: status, headers: ["content-type": "application/json"], body: ByteBuffer(string: text))
    }

    public static func text(_ status: HTTPResponseStatus, _ text: String, contentType: String = "text/plain; charset=utf-8") -> SimpleHTTPResponse {
        SimpleHTTPResponse(status: status, headers: ["content-type": contentType], body: ByteBuffer(string: text))
    }
}

/// A small HTTP/1.1 server on SwiftNIO for the non-hot paths: health and metrics endpoints, test fakes.
/// Each request runs its async handler; responses keep request order (NIO's pipelining helper).
public final class SimpleHTTPServer: Sendable {
    public typealias Handler = @Sendable (SimpleHTTPRequest) async -> SimpleHTTPResponse

    private let channel: any Channel
    public let port: Int

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    public static func start(
        host: String, port: Int, maxBodySize: Int = 1 << 20,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, handler: @escaping Handler
    ) async throws -> SimpleHTTPServer {
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(SimpleHTTPHandler(maxBodySize: maxBodySize, handler: handler))
                }
            }
            .bind(host: host, port: port).get()
        return SimpleHTTPServer(channel: channel)
    }

    public func stop() async {
        try? await channel.close().get()
    }
}

final class SimpleHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let handler: SimpleHTTPServer.Handler
    private let maxBodySize: Int
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()
    private var tooLarge = false

    init(maxBodySize: Int, handler: @escaping SimpleHTTPServer.Handler) {
        self.maxBodySize = maxBodySize
        self.handler = handler
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body.clear()
            tooLarge = false
        case .body(var chunk):
            if body.readableBytes + chunk.readableBytes > maxBodySize { tooLarge = true } else { body.writeBuffer(&chunk) }
        case .end:
            guard let head else { return }
            self.head = nil
            let keepAlive = head.isKeepAlive
            if tooLarge {
                write(
                    context: context, head: head,
                    response: .json(.payloadTooLarge, #"{"error":{"code":"payload_too_large","message":"body over limit"}}"#), keepAlive: false)
                return
            }
            let request = SimpleHTTPRequest(method: head.method, uri: head.uri, headers: head.headers, body: body)
            let handler = self.handler
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let promise = context.eventLoop.makePromise(of: SimpleHTTPResponse.self)
            promise.completeWithTask { await handler(request) }
            promise.futureResult.whenSuccess { response in
                let (this, context) = loopBound.value
                this.write(context: context, head: head, response: response, keepAlive: keepAlive)
            }
        }
    }

    private func write(context: ChannelHandlerContext, head: HTTPRequestHead, response: SimpleHTTPResponse, keepAlive: Bool) {
        var headers = response.headers
        headers.replaceOrAdd(name: "content-length", value: String(response.body.readableBytes))
        if !keepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: response.status, headers: headers))), promise: nil)
        if head.method != .HEAD, response.body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(response.body))), promise: nil)
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { channel.close(promise: nil) }
        }
    }
}

/// Runs a `SimpleHTTPServer` as a service: bound at start, closed on graceful shutdown.
public struct SimpleHTTPService: Service {
    let host: String
    let port: Int
    let handler: SimpleHTTPServer.Handler
    let logger: Logger
    let name: String

    public init(name: String, host: String, port: Int, logger: Logger, handler: @escaping SimpleHTTPServer.Handler) {
        self.name = name
        self.host = host
        self.port = port
        self.logger = logger
        self.handler = handler
    }

    public func run() async throws {
        let server = try await SimpleHTTPServer.start(host: host, port: port, handler: handler)
        logger.notice("listening", metadata: ["service": "\(name)", "address": "\(host):\(server.port)"])
        try? await gracefulShutdown()
        await server.stop()
    }
}
