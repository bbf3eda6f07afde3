public import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
public import NIOCore
import RoundupCore
public import RoundupJobs
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams
public import ServiceLifecycle
import Tracing

/// The worker's consumer of the job stream: the one stream consumer (`StreamConsumer`) running up to `concurrency`
/// sync and import jobs at once, each under its entry's lease; it takes over jobs whose worker died (their entries sat
/// idle) — resuming them from `processed` unless they already read as stale, which the app has been told and will
/// have resubmitted.
public struct JobConsumer: Service {
    public struct Options: Sendable {
        public var keys: RedisKeys
        public var consumer: String
        public var concurrency: Int
        public var claimIdle: TimeAmount
        public var staleAfter: TimeInterval

        public init(keys: RedisKeys, consumer: String, concurrency: Int, claimIdle: TimeAmount, staleAfter: TimeInterval) {
            self.keys = keys
            self.consumer = consumer
            self.concurrency = concurrency
            self.claimIdle = claimIdle
            self.staleAfter = staleAfter
        }
    }

    let consumer: StreamConsumer<RedisStreamDriver, JobHandler>
    let pauses: PauseWatcher?

    public init(
        options: Options, redis: RedisClient, store: any JobRepository, engine: SyncEngine, pauses: PauseWatcher? = nil, logger: Logger
    ) {
        self.pauses = pauses
        let driver = RoundupStream.jobs.driver(redis: redis, keys: options.keys, consumer: options.consumer)
        var consumerOptions = StreamConsumer<RedisStreamDriver, JobHandler>.Options(
            name: "jobs", consumer: options.consumer, batchSize: 1, concurrency: options.concurrency,
            claimIdle: .nanoseconds(options.claimIdle.nanoseconds), reclaimEvery: .seconds(2))
        consumerOptions.readsAhead = false
        consumer = StreamConsumer(
            options: consumerOptions,
            driver: driver,
            handler: JobHandler(
                holder: options.consumer, staleAfter: options.staleAfter, store: store, engine: engine, redis: redis, keys: options.keys,
                othersWaiting: { (await driver.waiting() ?? 0) > 0 }, pauses: pauses, logger: logger),
            metrics: .init(gauges: [.length, .pending, .oldestPendingAge, .oldestWaitingAge, .lag]),
            logger: logger)
    }

    public func run() async throws {
        // Jobs in flight stop after their current item (they see the graceful shutdown) and stay pending.
        await consumer.run(.jobs, pauses: pauses)
    }
}

/// One job entry (`SyncJobMessage`): starts the job in the store and runs it; the entry is acked when the job ended or
/// is skipped, and left pending when it could not start or was interrupted by a shutdown. An entry that is no job
/// message is dead-lettered by the consumer (`RedisKeys.jobDeadLetters`).
struct JobHandler: StreamHandler {
    typealias Message = SyncJobMessage

    let holder: String
    let staleAfter: TimeInterval
    let store: any JobRepository
    let engine: SyncEngine
    let redis: RedisClient
    let keys: RedisKeys
    /// Whether job entries wait for a worker (every slot busy): a long sync job then yields its turn.
    let othersWaiting: @Sendable () async -> Bool
    /// Operators' pauses: a paused account's jobs wait (queued, their entries pending) until it is resumed.
    let pauses: PauseWatcher?
    let logger: Logger
    /// The jobs running here: a second entry of one of them (a yield whose old entry was not acked, and was reclaimed)
    /// is acked without running it twice at once.
    let runningHere = NIOLockedValueBox(Set<String>())

    func handle(_ batch: [Delivered<SyncJobMessage>]) async -> StreamBatchResult<UnclassifiedFailure> {
        var result = StreamBatchResult<UnclassifiedFailure>()
        for entry in batch {
            if let account = entry.message.account, pauses?.isPaused(account: account) == true {
                result.retry.append((entry.id, nil))
                continue
            }
            // Tracing on: the job is a consumer span, continuing the trace of the app's sync that made it when it sent
            // one; its Trello requests are children.
            var attributes = SpanAttributes.processing("jobs", messageID: entry.id)
            attributes["roundup.job.id"] = entry.message.jobID
            attributes["roundup.job.kind"] = (entry.message.kind ?? .sync).rawValue
            let turn = await RoundupTracing.withSpan("run job", ofKind: .consumer, continuing: entry.message.trace, attributes: attributes) {
                await run(entry.message)
            }
            switch turn {
            case .finished: result.done.append(entry.id)
            case .unfinished: result.retry.append((entry.id, nil))
            case .yielded:
                // Behind the jobs that waited: a new entry at the stream's end, this one acked. If Redis does not take
                // it, this entry stays pending and is reclaimed; the job, queued, starts again either way.
                do {
                    _ = try await redis.send(.streamAppend(keys.jobStream, fields: entry.message.fields), timeout: .seconds(2))
                    result.done.append(entry.id)
                } catch {
                    logger.warning("yielded job not queued again; its entry will be reclaimed", metadata: ["job": "\(entry.message.jobID)"])
                    result.retry.append((entry.id, nil))
                }
            }
        }
        return result
    }

    enum Turn { case finished, unfinished, yielded }

    /// Whether the entry is finished with, or its job gave its turn back.
    private func run(_ message: SyncJobMessage) async -> Turn {
        guard runningHere.withLockedValue({ $0.insert(message.jobID).inserted }) else {
            logger.info("job skipped", metadata: ["job": "\(message.jobID)", "reason": "already running here"])
            return .finished
        }
        defer { _ = runningHere.withLockedValue { $0.remove(message.jobID) } }
        let start: JobStart
        do {
            start = try await store.startJob(id: message.jobID, holder: holder, staleAfter: staleAfter)
        } catch {
            logger.warning("job could not be started; it will be reclaimed", metadata: ["job": "\(message.jobID)", "error": "\(error)"])
            return .unfinished
        }
        switch start {
        case .skip(let reason):
            if reason == .stale {
                Counter(
                    label: "roundup_sync_jobs_total", dimensions: [("kind", (message.kind ?? .sync).rawValue), ("status", JobOutcome.stale.rawValue)]
                )
                .increment()
            }
            logger.info("job skipped", metadata: ["job": "\(message.jobID)", "reason": "\(reason)"])
            return .finished
        case .run(let job):
            // The consumer extends the entry's lease while this runs, so no other worker takes over a live job.
            switch await engine.run(job, holder: holder, othersWaiting: othersWaiting) {
            case .interrupted: return .unfinished
            case .yielded: return .yielded
            case .completed, .failed, .lost: return .finished
            }
        }
    }

    /// The jobs running here.
    func recordGauges(inFlight: Int) async {
        Gauge(label: "roundup_sync_jobs_running").record(inFlight)
    }
}
