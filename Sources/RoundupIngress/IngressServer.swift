public import Logging
public import NIOCore
import NIOHTTP1
import NIOPosix
import RoundupCore
public import RoundupRedis
public import RoundupRuntime
public import RoundupStreams
public import ServiceLifecycle

/// The ingress as a service: binds, serves until graceful shutdown, then stops accepting and closes.
public struct IngressService: Service {
    public struct Options: Sendable {
        public var host: String
        public var port: Int
        public var publicURL: String
        public var keys: RedisKeys
        public var dedupeTTLSeconds: Int
        public var secretCacheTTL: TimeAmount = .seconds(5)
        public var redisTimeout: TimeAmount = .milliseconds(800)
        public var answerDeadline: TimeAmount = .milliseconds(950)
        /// Events waiting in the stream beyond which deliveries are answered 503; 0: no bound.
        public var maxBacklog: Int
        /// One account's share of its shard (none unless set: `RoundupConfiguration.webhookShares` sets them).
        public var shares: WebhookShares = .unbounded
        public var limits: HTTPLimits
        /// Replicas that must have an accepted event before it is answered 200 (nil: none).
        public var replicas: RedisReplicaWait? = RedisReplicaWait(count: .auto, timeout: .milliseconds(250))

        public init(
            host: String, port: Int, publicURL: String, keys: RedisKeys, dedupeTTLSeconds: Int, maxBacklog: Int = 0, limits: HTTPLimits = HTTPLimits()
        ) {
            self.host = host
            self.port = port
            self.publicURL = publicURL
            self.keys = keys
            self.dedupeTTLSeconds = dedupeTTLSeconds
            self.maxBacklog = maxBacklog
            self.limits = limits
        }
    }

    let options: Options
    let redis: RedisClient
    let logger: Logger
    let metricsText: @Sendable () -> String
    let onBound: @Sendable (Int) -> Void

    public init(
        options: Options, redis: RedisClient, logger: Logger, metricsText: @escaping @Sendable () -> String = { "" },
        onBound: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.options = options
        self.redis = redis
        self.logger = logger
        self.metricsText = metricsText
        self.onBound = onBound
    }

    public func run() async throws {
        let context = IngressContext(
            redis: redis, keys: options.keys,
            directory: SecretDirectory(redis: redis, keys: options.keys, ttl: options.secretCacheTTL),
            publicURL: options.publicURL, dedupeTTLSeconds: options.dedupeTTLSeconds, maxBacklog: options.maxBacklog, shares: options.shares,
            redisTimeout: options.redisTimeout, replicas: options.replicas,
            answerDeadline: options.answerDeadline, metrics: IngressMetrics(), metricsText: metricsText, logger: logger,
            tracer: RoundupTracing.tracer)
        let limits = options.limits
        let connectionLimit = ConnectionLimitHandler(limit: limits.maxConnections, server: "ingress")
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(connectionLimit) }
            }
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // The handler answers the decoder's errors itself, as JSON (withErrorHandling: false).
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withPipeliningAssistance: true, withErrorHandling: false, withOutboundHeaderValidation: true,
                        withEncoderConfiguration: .init(), withDecoderLimitConfiguration: limits.decoderLimits)
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPDeadlineHandler<HTTPServerRequestPart, HTTPServerResponsePart>(limits: limits, server: "ingress"))
                    try channel.pipeline.syncOperations.addHandler(IngressHandler(context: context))
                }
            }
            .bind(host: options.host, port: options.port).get()
        let port = channel.localAddress?.port ?? options.port
        onBound(port)
        logger.notice("ingress listening", metadata: ["address": "\(options.host):\(port)", "public_url": "\(options.publicURL)"])
        try? await gracefulShutdown()
        logger.notice("ingress stopping")
        try? await channel.close().get()
    }
}
