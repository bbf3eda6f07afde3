import Foundation
public import Logging
import NIOCore
import NIOHTTP1
public import Prometheus
import RoundupCore
import RoundupDatabase
import RoundupRedis
public import RoundupRuntime
import RoundupStore
import RoundupStreams
import ServiceLifecycle

/// Everything `roundup-pusher` runs: the APNs clients (production and sandbox), the token provider, the consumer on
/// the push stream and the health/metrics endpoint.
public enum PusherApplication {
    public static func run(configuration: RoundupConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) async throws {
        let missing = configuration.missingAPNsKeys
        if !missing.isEmpty, configuration.pusherWithoutAPNs == .idle {
            // Pushes wait on the push stream (and RoundupNoPushers fires) until the credentials come and the process
            // restarts.
            let problem = "APNs is not configured (\(missing.joined(separator: ", ")) not set): sending nothing"
            logger.warning("pusher idle", metadata: ["reason": "\(problem)"])
            let ops = SimpleHTTPService.operations(
                name: "pusher-ops", host: configuration.host, port: configuration.pusherPort, logger: logger, registry: registry
            ) { problem }
            try await RoundupServices.run([.init(service: ops)], configuration: configuration, logger: logger) {}
            return
        }
        guard missing.isEmpty else {
            throw ConfigurationError(
                key: missing.joined(separator: ", "), problem: "must be set: roundup-pusher cannot sign APNs requests without them")
        }
        // One app per topic, each with its own token and connections to each environment.
        func app(topic: String, keyFile: String, keyID: String, teamID: String, key: String) throws -> APNsApp {
            let tokens: APNsTokenProvider
            do {
                tokens = try APNsTokenProvider(keyFile: keyFile, keyID: keyID, teamID: teamID)
            } catch {
                throw ConfigurationError(key: key, problem: "is not a readable .p8 (PKCS#8 PEM P-256) key for \(topic): \(error)")
            }
            return APNsApp(
                topic: topic, tokens: tokens,
                production: try APNsClient(
                    endpoint: try APNsClient.Endpoint(url: configuration.apnsURL), caFile: configuration.apnsCAFile,
                    connections: configuration.apnsConnections, logger: logger),
                sandbox: try APNsClient(
                    endpoint: try APNsClient.Endpoint(url: configuration.apnsSandboxURL), caFile: configuration.apnsCAFile, connections: 1,
                    logger: logger))
        }
        var others: [BundleID: APNsApp] = [:]
        for credentials in configuration.apnsApps {
            others[credentials.topic] = try app(
                topic: credentials.topic.rawValue, keyFile: credentials.keyFile, keyID: credentials.keyID, teamID: credentials.teamID,
                key: "ROUNDUP_APNS_APPS_FILE")
        }
        let apps = APNsApps(
            defaultApp: try app(
                topic: configuration.apnsTopic!, keyFile: configuration.apnsKeyFile!, keyID: configuration.apnsKeyID!,
                teamID: configuration.apnsTeamID!, key: "ROUNDUP_APNS_KEY_FILE"),
            others: others)
        logger.info(
            "APNs apps", metadata: ["topics": "\(([configuration.apnsTopic!] + others.keys.map(\.rawValue).sorted()).joined(separator: ", "))"])
        let store = try await Stores.make(configuration: configuration, logger: logger)
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let pauses = PauseWatcher(streams: [.push], redis: redis, keys: configuration.redisKeys, logger: logger)
        let consumer = PushConsumer(
            options: .init(
                keys: configuration.redisKeys, consumer: configuration.workerConsumerName, window: .seconds(configuration.pushWindowSeconds)),
            redis: redis, store: store, sender: PushSender(apps: apps, logger: logger), pauses: pauses, logger: logger)
        let ops = SimpleHTTPService.operations(
            name: "pusher-ops", host: configuration.host, port: configuration.pusherPort, logger: logger, registry: registry, redis: redis,
            pauses: pauses, storePing: { try await store.ping() })
        let services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: ops),
            .init(service: pauses),
            .essential(consumer),
        ]
        try await RoundupServices.run(
            services, dependencies: store.service.map { [$0] } ?? [],
            startUp: {
                try await store.migrate()
                try await LegacyKeys.migrate(redis: redis, keys: configuration.redisKeys, logger: logger)
                await pauses.refresh()
            }, configuration: configuration,
            logger: logger
        ) {
            apps.shutdown()
            await redis.shutdown()
        }
    }
}
