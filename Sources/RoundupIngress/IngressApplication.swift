import Logging
import NIOCore
import Prometheus
import RoundupCore
import RoundupRedis
import ServiceLifecycle

/// Everything `roundup-ingress` runs: a Redis client and the webhook server, in one service group.
public enum IngressApplication {
    public static func run(configuration: RoundupConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) async throws {
        guard let publicURL = configuration.publicURL else {
            throw ConfigurationError(key: "ROUNDUP_PUBLIC_URL", problem: "is required: webhook signatures are computed over it")
        }
        var redisConfiguration = try RedisConfiguration(url: configuration.redisURL)
        redisConfiguration.caFile = configuration.redisCAFile
        redisConfiguration.connectTimeout = .milliseconds(500)
        redisConfiguration.commandTimeout = .milliseconds(800)
        let redis = RedisClient(configuration: redisConfiguration, logger: logger)
        let ingress = IngressService(
            options: .init(
                host: configuration.host, port: configuration.ingressPort, publicURL: publicURL,
                keys: configuration.redisKeys, dedupeTTLSeconds: configuration.dedupeTTLSeconds, maxBacklog: configuration.maxBacklog,
                limits: configuration.httpLimits),
            redis: redis, logger: logger, metricsText: { RoundupMetrics.render(registry) })
        try await RoundupServices.run([.init(service: ingress)], configuration: configuration, logger: logger) {
            await redis.shutdown()
        }
    }
}
