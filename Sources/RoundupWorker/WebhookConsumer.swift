import Foundation
public import Logging
import Metrics
public import NIOCore
import RoundupCore
import RoundupJobs
public import RoundupRedis
import RoundupRuntime
import RoundupStore
public import RoundupStreams
public import ServiceLifecycle
import Tracing

/// The worker's consumer of the webhook stream: the one stream consumer (`StreamConsumer`) reading batches that
/// `WebhookProcessor` turns into changes; entries delivered too often are dead-lettered with their last error.
public struct WebhookConsumer: Service {
    public struct Options: Sendable {
        public var keys: RedisKeys
        public var consumer: String
        public var batchSize: Int
        public var maxDeliveries: Int
        public var claimIdle: TimeAmount
        public var block: TimeAmount = .milliseconds(1000)
        /// Dead letters kept at most, and their age bound.
        public var deadLetterMax: Int
        public var deadLetterMaxAge: Duration

        public init(
            keys: RedisKeys, consumer: String, batchSize: Int, maxDeliveries: Int, claimIdle: TimeAmount, deadLetterMax: Int = 10_000,
            deadLetterMaxAge: Duration = .seconds(180 * 86_400)
        ) {
            self.keys = keys
            self.consumer = consumer
            self.batchSize = batchSize
            self.maxDeliveries = maxDeliveries
            self.claimIdle = claimIdle
            self.deadLetterMax = deadLetterMax
            self.deadLetterMaxAge = deadLetterMaxAge
        }
    }

    let consumer: StreamConsumer<ShardedStreamDriver, WebhookHandler>
    let pauses: PauseWatcher?

    public init(options: Options, redis: RedisClient, processor: WebhookProcessor, pauses: PauseWatcher? = nil, logger: Logger) {
        self.pauses = pauses
        let driver = RoundupStream.webhookDriver(
            redis: redis, keys: options.keys, consumer: options.consumer, deadLetterMax: options.deadLetterMax,
            deadLetterMaxAge: options.deadLetterMaxAge)
        let metrics = WorkerMetrics()
        consumer = StreamConsumer(
            options: .init(
                name: "webhooks", consumer: options.consumer, batchSize: options.batchSize, block: .nanoseconds(options.block.nanoseconds),
                claimIdle: .nanoseconds(options.claimIdle.nanoseconds), maxDeliveries: options.maxDeliveries),
            driver: driver,
            handler: WebhookHandler(processor: processor, redis: redis, keys: options.keys, metrics: metrics, pauses: pauses, logger: logger),
            metrics: .init(
                gauges: Set(StreamConsumer<ShardedStreamDriver, WebhookHandler>.MetricSet.StreamGauge.allCases), reclaimed: metrics.reclaimed,
                deadLettered: metrics.deadLettered, deadLettersTrimmed: metrics.deadLettersTrimmed, writesRefused: metrics.settleWritesRefused),
            logger: logger)
    }

    public func run() async throws {
        await consumer.run(.webhooks, pauses: pauses)
    }
}

/// A batch of webhook entries through `WebhookProcessor`: done entries are acked (a background push asked for each
/// account with new changes), failed ones recorded with their typed failure. Entries that do not decode
/// (`WebhookProcessor.decode`) never reach it: the consumer dead-letters them.
struct WebhookHandler: StreamHandler {
    typealias Failure = EventFailure

    let processor: WebhookProcessor
    let redis: RedisClient
    let keys: RedisKeys
    let metrics: WorkerMetrics
    /// Operators' pauses: an account's entries wait while it is paused.
    let pauses: PauseWatcher?
    let logger: Logger
    /// Traces (`RoundupTracing`): nil when off.
    var tracer: (any Tracer)? = RoundupTracing.tracer

    func decode(_ entry: StreamDelivery) throws(StreamUndecodable) -> WebhookReading { try WebhookProcessor.decode(entry) }

    /// An account's entries are handled in their order: while some wait for its Trello rate limit, its later ones wait
    /// behind them.
    func orderKey(_ message: WebhookReading) -> String? { message.account }

    /// With tracing on, the batch is one consumer span linked to each entry's enqueue (a batch mixes accounts and
    /// traces, so it is no one entry's child), the Trello reads and the store's write its children.
    func handle(_ batch: [Delivered<WebhookReading>]) async -> StreamBatchResult<EventFailure> {
        guard let tracer else { return await handleBatch(batch) }
        let span = tracer.startSpan("process webhooks", context: .topLevel, ofKind: .consumer)
        defer { span.end() }
        span.attributes = .processing("webhooks")
        span.attributes["messaging.consumer.group.name"] = keys.workerGroup
        span.attributes["messaging.batch.message_count"] = batch.count
        for entry in batch {
            guard let trace = entry.message.trace else { continue }
            var link = SpanAttributes()
            link["messaging.message.id"] = entry.id
            if let action = entry.message.actionID { link["roundup.trello.action.id"] = action }
            span.addLink(SpanLink(context: tracer.context(of: trace), attributes: link))
        }
        // The push and the change streams' wake-up this batch asks for carry its context.
        let trace = tracer.traceHeaders(of: span.context)
        let result = await ServiceContext.withValue(span.context) { await handleBatch(batch, trace: trace) }
        span.attributes["roundup.entries.done"] = result.done.count
        span.attributes["roundup.entries.retried"] = result.retry.count
        if !result.retry.isEmpty { span.setStatus(SpanStatus(code: .error)) }
        return result
    }

    private func handleBatch(_ batch: [Delivered<WebhookReading>], trace: TraceHeaders? = nil) async -> StreamBatchResult<EventFailure> {
        // A paused account's entries wait in their shard, pending (never dead-lettered for it), the others go on.
        var held: [(id: String, error: EntryError)] = []
        var batch = batch
        if let paused = pauses?.pausedAccounts, !paused.isEmpty {
            batch.removeAll { entry in
                guard paused.contains(entry.message.account) else { return false }
                held.append((entry.id, EntryError(.accountPaused, "account \(entry.message.account) paused by an operator")))
                return true
            }
        }
        var outcome = await processor.process(batch)
        outcome.retry += held
        if !outcome.boardLabelChanges.isEmpty {
            // The boards' lists are reconciled at a worker's next tick. Not done, no harm beyond a wait: the periodic
            // reconciliation brings the labels too.
            let members = outcome.boardLabelChanges.map { RedisArgument($0.accountID + "\t" + $0.id) }
            do {
                _ = try await redis.send(RedisCommand("SADD", [RedisArgument(keys.reconcileRequests)] + members), timeout: .seconds(2))
            } catch {
                logger.warning("board label change not queued for reconciliation", metadata: ["error": "\(error)"])
            }
        }
        var result = StreamBatchResult<EventFailure>(done: outcome.done, retry: outcome.retry.map { (id: $0.id, failure: Optional($0.error)) })
        // Handed back by the consumer once the account's token has room, before any later entry of the account.
        result.later = outcome.throttled
        // New changes: a background push to the account's devices, and a wake-up for its open change streams.
        result.appends = outcome.accountsWithChanges.sorted().flatMap { account in
            NewChanges.appends(account: account, reason: .changes, keys: keys, trace: trace)
        }
        result.detail = outcome
        return result
    }

    func settled(_ result: StreamBatchResult<EventFailure>, batch: [Delivered<WebhookReading>], refusedWrites: Int, duration: Duration) async {
        guard let outcome = result.detail as? BatchOutcome else { return }
        // A throttled account's entries wait for its token (counted, not warned about: its own flood, most likely).
        let throttled = outcome.retry.filter { $0.error.failure == .trelloThrottled }.count
        let held = outcome.retry.filter { $0.error.failure == .accountPaused }.count
        if let failed = outcome.retry.first(where: { $0.error.failure != .trelloThrottled && $0.error.failure != .accountPaused }) {
            logger.warning(
                "events will be retried", metadata: ["count": "\(outcome.retry.count - throttled - held)", "first_error": "\(failed.error)"])
        }
        if held > 0 { metrics.heldForPausedAccounts.increment(by: held) }
        if throttled > 0 {
            metrics.throttled.increment(by: throttled)
            logger.debug("events wait for their account's trello rate limit", metadata: ["count": "\(throttled)"])
        }
        var byType: [String: (ok: Int, retry: Int)] = [:]
        for id in outcome.done { byType[outcome.types[id] ?? "unknown", default: (0, 0)].ok += 1 }
        for (id, _) in outcome.retry { byType[outcome.types[id] ?? "unknown", default: (0, 0)].retry += 1 }
        for (type, counts) in byType {
            if counts.ok > 0 {
                Counter(label: "roundup_worker_events_by_type_total", dimensions: [("type", type), ("result", "done")]).increment(by: counts.ok)
            }
            if counts.retry > 0 {
                Counter(label: "roundup_worker_events_by_type_total", dimensions: [("type", type), ("result", "retry")]).increment(by: counts.retry)
            }
        }
        RoundupLatency.webhookToChange.record(since: outcome.applied)
        metrics.processed.increment(by: outcome.done.count - outcome.dropped)
        metrics.dropped.increment(by: outcome.dropped)
        metrics.retried.increment(by: outcome.retry.count - throttled - held)
        metrics.changes.increment(by: outcome.changesWritten)
        let elapsed = duration.components
        let nanoseconds = elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
        metrics.batch.recordNanoseconds(nanoseconds)
        logger.debug(
            "batch settled",
            metadata: [
                "entries": "\(batch.count)", "done": "\(outcome.done.count)", "changes": "\(outcome.changesWritten)",
                "duration_ms": "\(nanoseconds / 1_000_000)",
            ])
    }
}

struct WorkerMetrics: Sendable {
    let processed = Counter(label: "roundup_worker_events_total", dimensions: [("result", "processed")])
    let dropped = Counter(label: "roundup_worker_events_total", dimensions: [("result", "dropped")])
    let retried = Counter(label: "roundup_worker_events_total", dimensions: [("result", "retry")])
    /// Left in the stream because their account's Trello token was throttled (`EventFailure.trelloThrottled`).
    let throttled = Counter(label: "roundup_worker_events_total", dimensions: [("result", "throttled")])
    /// Left in the stream because an operator paused their account (`EventFailure.accountPaused`), each time seen.
    let heldForPausedAccounts = Counter(label: "roundup_worker_events_total", dimensions: [("result", "account_paused")])
    let deadLettered = Counter(label: "roundup_worker_events_total", dimensions: [("result", "dead_letter")])
    let changes = Counter(label: "roundup_worker_changes_written_total")
    let reclaimed = Counter(label: "roundup_worker_reclaimed_total")
    let batch = Metrics.Timer(label: "roundup_worker_batch_duration_seconds")
    /// Dead letters removed by the retention bounds (count and age).
    let deadLettersTrimmed = Counter(label: "roundup_dead_letters_trimmed_total")
    /// Writes Redis refused while a batch was settled (pushes, last errors), most likely at its maxmemory.
    let settleWritesRefused = Counter(label: "roundup_worker_redis_writes_refused_total")
}
