public import Logging
import NIOCore
public import Prometheus
import RoundupCore
import RoundupRedis
public import RoundupRuntime
import RoundupStreams
import ServiceLifecycle

/// Everything `roundup-ingress` runs: a Redis client and the webhook server, in one service group.
public enum IngressApplication {
    public static func run(configuration: RoundupConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) async throws {
        guard let publicURL = configuration.publicURL else {
            throw ConfigurationError(key: "ROUNDUP_PUBLIC_URL", problem: "is required: webhook signatures are computed over it")
        }
        var redisConfiguration = try RedisConfiguration(configuration)
        redisConfiguration.connectTimeout = .milliseconds(500)
        // The script and its WAIT share this deadline (ROUNDUP_REDIS_WAIT_TIMEOUT_MS is at most 500 ms of it).
        redisConfiguration.commandTimeout = .milliseconds(800)
        let redis = RedisClient(configuration: redisConfiguration, logger: logger)
        // The workers' group, made now while Redis has room: a Redis that fills up before any worker has run would
        // refuse to create it then, and nothing could drain the stream. Best effort; the workers create it too.
        do {
            for part in RoundupStream.webhooks.parts(configuration.redisKeys) {
                try await redis.createGroupIfMissing(stream: part.stream, group: configuration.redisKeys.workerGroup)
            }
        } catch {
            logger.notice("consumer group not created yet", metadata: ["error": "\(error)"])
        }
        var options = IngressService.Options(
            host: configuration.host, port: configuration.ingressPort, publicURL: publicURL,
            keys: configuration.redisKeys, dedupeTTLSeconds: configuration.dedupeTTLSeconds, maxBacklog: configuration.maxBacklog,
            limits: configuration.httpLimits)
        options.shares = configuration.webhookShares
        options.replicas =
            configuration.redisWaitReplicas == .exactly(0)
            ? nil
            : RedisReplicaWait(count: configuration.redisWaitReplicas, timeout: .milliseconds(Int64(configuration.redisWaitTimeoutMilliseconds)))
        let ingress = IngressService(
            options: options,
            redis: redis, logger: logger, metricsText: { RoundupMetrics.render(registry) })
        try await RoundupServices.run([.init(service: ingress)], configuration: configuration, logger: logger) {
            await redis.shutdown()
        }
    }
}
