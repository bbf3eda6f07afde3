import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdCore
public import Logging
import NIOCore
import NIOHTTPTypes
public import Prometheus
import RoundupCore
import RoundupDatabase
import RoundupJobs
import RoundupRedis
public import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTrello
import ServiceLifecycle

/// Everything `roundup-api` runs, wired from the configuration.
public enum APIApplication {
    public static func run(configuration: RoundupConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) async throws {
        guard let publicURL = configuration.publicURL else {
            throw ConfigurationError(key: "ROUNDUP_PUBLIC_URL", problem: "is required: Trello webhooks are registered with it")
        }
        let store = try await Stores.make(configuration: configuration, logger: logger)
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let http = TrelloClient.makeHTTPClient()
        let trello = TrelloClient.make(configuration: configuration, http: http, redis: redis, logger: logger)
        let engine = SyncEngine(
            options: .init(
                keys: configuration.redisKeys, staleAfter: TimeInterval(configuration.jobStaleSeconds),
                heartbeat: .seconds(configuration.jobHeartbeatSeconds)),
            store: store, trello: trello,
            echo: EchoFingerprints(redis: redis, keys: configuration.redisKeys, ttlSeconds: configuration.echoTTLSeconds),
            redis: redis, logger: logger)
        if configuration.bootstrapToken == nil {
            logger.notice("account creation is off (ROUNDUP_BOOTSTRAP_TOKEN is not set)")
        }
        let api = API(
            options: .init(configuration: configuration, publicURL: publicURL),
            store: store, redis: redis, trello: trello, engine: engine, logger: logger, metricsText: { RoundupMetrics.render(registry) })
        let limits = configuration.httpLimits
        let app = Application(
            router: api.router(),
            server: .http1(
                configuration: .init(
                    additionalChannelHandlers: [
                        HTTPDeadlineHandler<HTTPRequestPart, HTTPResponsePart>(limits: limits, server: "api", writeDeadlines: true)
                    ],
                    httpDecoderConfiguration: .init(
                        maxHeaderFieldSize: limits.maxHeaderBytes, maxHeaderListSize: limits.maxHeaderBytes, maxHeaderFieldCount: 100))),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.apiPort), serverName: "roundup-api",
                availableConnectionsDelegate: MaximumAvailableConnections(limits.maxConnections, logger: logger)),
            logger: logger)
        try await RoundupServices.run(
            // Services stop in reverse order: the change streams end first, so the HTTP server can drain; the leases
            // are renewed until then.
            [.init(service: api.leases), .init(service: app), .init(service: api.streams)], dependencies: store.service.map { [$0] } ?? [],
            startUp: { try await store.migrate() },
            configuration: configuration, logger: logger
        ) {
            try? await http.shutdown()
            await redis.shutdown()
        }
    }
}
