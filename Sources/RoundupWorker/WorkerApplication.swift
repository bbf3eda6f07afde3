import AsyncHTTPClient
import Foundation
public import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
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

/// Everything `roundup-worker` runs, wired from the configuration: the store, Redis, the Trello client,
/// the consumer loop and the health/metrics endpoint, in one service group.
public enum WorkerApplication {
    public static func run(configuration: RoundupConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) async throws {
        let store = try await Stores.make(configuration: configuration, logger: logger)
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let http = TrelloClient.makeHTTPClient()
        let trello = TrelloClient.make(configuration: configuration, http: http, redis: redis, logger: logger)
        let echo = EchoFingerprints(redis: redis, keys: configuration.redisKeys, ttlSeconds: configuration.echoTTLSeconds)
        let processor = WebhookProcessor(
            store: store, cards: trello, logger: logger, accountLanes: configuration.workerAccountLanes, echo: echo,
            bulkReadThreshold: configuration.workerListReadMin, trelloWait: .milliseconds(configuration.workerTrelloWaitMilliseconds))
        let reconciler = Reconciler(
            store: store, trello: trello, redis: redis, keys: configuration.redisKeys, publicURL: configuration.publicURL, echo: echo, logger: logger)
        let engine = SyncEngine(
            options: .init(
                keys: configuration.redisKeys, staleAfter: TimeInterval(configuration.jobStaleSeconds),
                heartbeat: .seconds(configuration.jobHeartbeatSeconds), turn: .seconds(configuration.jobTurnSeconds)),
            store: store, trello: trello.with(maxAttempts: 2), echo: echo, redis: redis, reconciler: reconciler, logger: logger)
        let interval = TimeInterval(configuration.reconcileIntervalSeconds)
        let scheduler = ReconcileScheduler(
            reconciler: reconciler, interval: interval, tick: .milliseconds(Int(max(0.2, min(5, interval / 4)) * 1000)), logger: logger)
        let pauses = PauseWatcher(streams: [.webhooks, .jobs], redis: redis, keys: configuration.redisKeys, logger: logger)
        let jobs = JobConsumer(
            options: .init(
                keys: configuration.redisKeys, consumer: configuration.workerConsumerName, concurrency: configuration.jobConcurrency,
                claimIdle: .milliseconds(Int64(configuration.claimIdleMilliseconds)), staleAfter: TimeInterval(configuration.jobStaleSeconds)),
            redis: redis, store: store, engine: engine, pauses: pauses, logger: logger)
        let consumer = WebhookConsumer(
            options: .init(
                keys: configuration.redisKeys, consumer: configuration.workerConsumerName,
                batchSize: configuration.workerBatchSize, maxDeliveries: configuration.maxDeliveries,
                claimIdle: .milliseconds(Int64(configuration.claimIdleMilliseconds)), deadLetterMax: configuration.deadLetterMax,
                deadLetterMaxAge: .seconds(configuration.deadLetterMaxAgeDays * 86_400)),
            redis: redis, processor: processor, pauses: pauses, logger: logger)

        // Heal a flushed Redis: the ingress reads secrets and routes only from there. One attempt at start-up, before
        // the consumers start (the usual case: the ingress finds every account as soon as we are up); if it fails,
        // retried until Redis takes them, beside the consumers: a Redis at its maxmemory refuses these writes, and only
        // draining the stream frees it.
        let published = NIOLockedValueBox(false)
        let publish: @Sendable () async throws -> Void = {
            guard !published.withLockedValue({ $0 }) else { return }
            try await RoutePublisher.publishAll(store: store, redis: redis, keys: configuration.redisKeys, logger: logger)
            published.withLockedValue { $0 = true }
        }
        let startUp: @Sendable () async throws -> Void = {
            try await store.migrate()
            try await LegacyKeys.migrate(redis: redis, keys: configuration.redisKeys, logger: logger)
            // A stream paused before this worker started is never read, not even for one batch.
            await pauses.refresh()
            do {
                try await publish()
            } catch {
                logger.warning("publishing routes failed, retrying beside the consumers", metadata: ["error": "\(error)"])
            }
        }

        let ops = SimpleHTTPService.operations(
            name: "worker-ops", host: configuration.host, port: configuration.workerPort, logger: logger, registry: registry, redis: redis,
            pauses: pauses, storePing: { try await store.ping() })
        let services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: ops),
            .init(service: pauses),
            .essential(consumer),
            .essential(jobs),
            .init(service: scheduler, successTerminationBehavior: .ignore, failureTerminationBehavior: .gracefullyShutdownGroup),
            .init(
                service: ActivityPruner(store: store, retentionDays: configuration.activityRetentionDays, logger: logger),
                successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore),
            .init(
                service: HoldLapseWaker(store: store, redis: redis, keys: configuration.redisKeys, logger: logger),
                successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore),
            .init(
                service: RetryingTask(name: "publish routes", logger: logger, operation: publish), successTerminationBehavior: .ignore,
                failureTerminationBehavior: .ignore),
        ]
        try await RoundupServices.run(
            services, dependencies: store.service.map { [$0] } ?? [], startUp: startUp, configuration: configuration, logger: logger
        ) {
            try? await http.shutdown()
            await redis.shutdown()
        }
    }
}
