import Foundation
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupRedis
import ServiceLifecycle

/// The worker's loop on the webhook stream's consumer group: read a batch, process it, ack and delete what
/// is done; reclaim entries other workers left pending too long; dead-letter entries delivered too often.
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

    let options: Options
    let redis: RedisClient
    let processor: WebhookProcessor
    let logger: Logger
    let metrics = WorkerMetrics()

    public init(options: Options, redis: RedisClient, processor: WebhookProcessor, logger: Logger) {
        self.options = options
        self.redis = redis
        self.processor = processor
        self.logger = logger
    }

    var stream: String { options.keys.webhookStream }
    var group: String { options.keys.workerGroup }

    public func run() async throws {
        var lastReclaim = ContinuousClock.now - .seconds(3600)
        let reclaimEvery = Duration.milliseconds(min(5_000, max(100, options.claimIdle.nanoseconds / 2_000_000)))
        var reader: RedisConnection?
        defer { if let reader { reader.close().whenComplete { _ in } } }
        var backoff = Duration.milliseconds(100)
        var storeBackoff = Duration.milliseconds(200)

        // The next batch is requested before the current one is processed, so Redis sends it while we work.
        var prefetched: EventLoopFuture<RedisValue>?
        while !Task.isCancelled {
            if Task.isShuttingDownGracefully {
                // Stop reading; entries already delivered to this consumer are still processed and acked.
                guard let pending = prefetched else { break }
                prefetched = nil
                if let reply = try? await pending.get() {
                    let entries = StreamEntry.parse(read: reply)
                    if !entries.isEmpty { _ = try? await handle(entries) }
                }
                continue
            }
            do {
                if reader == nil || reader?.isActive == false {
                    prefetched = nil
                    try await redis.createGroupIfMissing(stream: stream, group: group)
                    reader = try await redis.dedicatedConnection().get()
                    logger.info("consuming", metadata: ["stream": "\(stream)", "consumer": "\(options.consumer)"])
                }
                if ContinuousClock.now - lastReclaim >= reclaimEvery {
                    lastReclaim = .now
                    try await reclaim()
                    await recordStreamGauges()
                }
                let reply = try await (prefetched ?? read(on: reader!, block: true)).get()
                prefetched = nil
                let entries = StreamEntry.parse(read: reply)
                if !entries.isEmpty {
                    // A full batch suggests more is waiting: ask for it now, without blocking.
                    if entries.count == options.batchSize { prefetched = read(on: reader!, block: false) }
                    if try await handle(entries) {
                        // The store is unreachable: stop taking new entries for a while; they wait in the stream.
                        try? await Task.sleep(for: storeBackoff)
                        storeBackoff = min(storeBackoff * 2, .seconds(5))
                    } else {
                        storeBackoff = .milliseconds(200)
                    }
                }
                backoff = .milliseconds(100)
            } catch {
                logger.warning("consumer loop error", metadata: ["error": "\(error)"])
                reader?.close().whenComplete { _ in }
                reader = nil
                prefetched = nil
                try? await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(5))
            }
        }
        logger.notice("consumer stopped", metadata: ["consumer": "\(options.consumer)"])
    }

    private func read(on connection: RedisConnection, block: Bool) -> EventLoopFuture<RedisValue> {
        var arguments: [RedisArgument] = ["GROUP", RedisArgument(group), RedisArgument(options.consumer), "COUNT", RedisArgument(options.batchSize)]
        if block { arguments += ["BLOCK", RedisArgument(Int(options.block.nanoseconds / 1_000_000))] }
        arguments += ["STREAMS", RedisArgument(stream), ">"]
        return connection.send(RedisCommand("XREADGROUP", arguments), timeout: options.block + .seconds(5))
    }


    /// Processes entries and settles each: ack+delete when done, record the error when it should be retried,
    /// dead-letter when it never can succeed. Returns whether the store could not be reached.
    @discardableResult
    func handle(_ entries: [StreamEntry]) async throws -> Bool {
        let started = ContinuousClock.now
        let outcome = await whileClaimed(entries.map(\.id)) { await self.processor.process(entries) }
        var commands: [RedisCommand] = []
        if !outcome.done.isEmpty {
            let ids = outcome.done.map { RedisArgument($0) }
            commands.append(RedisCommand("XACK", [RedisArgument(stream), RedisArgument(group)] + ids))
            // One consumer group reads this stream: once it has acked an entry nobody needs it.
            commands.append(RedisCommand("XDEL", [RedisArgument(stream)] + ids))
            commands.append(RedisCommand("HDEL", [RedisArgument(options.keys.webhookErrors)] + ids))
        }
        // Acking and deleting only free memory, so a Redis at its maxmemory still takes them; what follows may be
        // refused then (a push to wake the apps, an entry's last error), and its refusal must not stop the draining.
        let essential = commands.count
        // New changes: a background push to the account's devices (roundup-pusher coalesces them per device).
        for account in outcome.accountsWithChanges.sorted() {
            commands.append(RedisCommand("XADD", [
                RedisArgument(options.keys.pushStream), "MAXLEN", "~", "100000", "*", "account", RedisArgument(account), "kind", "background",
                "reason", "changes",
            ]))
        }
        for (id, error) in outcome.retry {
            commands.append(RedisCommand("HSET", [RedisArgument(options.keys.webhookErrors), RedisArgument(id), RedisArgument(error.recorded)]))
        }
        if !commands.isEmpty {
            let replies = try await redis.pipeline(commands)
            if let failure = replies.prefix(essential).first(where: { if case .error = $0 { return true } else { return false } }) {
                throw RedisClientError(.server, "settling batch: \(failure)")
            }
            let refused = replies.dropFirst(essential).filter { if case .error = $0 { return true } else { return false } }
            if let first = refused.first {
                metrics.settleWritesRefused.increment(by: refused.count)
                logger.warning("redis refused bookkeeping writes", metadata: ["count": "\(refused.count)", "error": "\(first)"])
            }
        }
        for (id, error) in outcome.poison {
            try await deadLetter(id: id, deliveries: 1, error: error.description)
        }
        if !outcome.retry.isEmpty {
            logger.warning("events will be retried", metadata: ["count": "\(outcome.retry.count)", "first_error": "\(outcome.retry[0].error)"])
        }
        var byType: [String: (ok: Int, retry: Int)] = [:]
        for id in outcome.done { byType[outcome.types[id] ?? "unknown", default: (0, 0)].ok += 1 }
        for (id, _) in outcome.retry { byType[outcome.types[id] ?? "unknown", default: (0, 0)].retry += 1 }
        for (type, counts) in byType {
            if counts.ok > 0 { Counter(label: "roundup_worker_events_by_type_total", dimensions: [("type", type), ("result", "done")]).increment(by: counts.ok) }
            if counts.retry > 0 { Counter(label: "roundup_worker_events_by_type_total", dimensions: [("type", type), ("result", "retry")]).increment(by: counts.retry) }
        }
        metrics.processed.increment(by: outcome.done.count - outcome.dropped)
        metrics.dropped.increment(by: outcome.dropped)
        metrics.retried.increment(by: outcome.retry.count)
        metrics.changes.increment(by: outcome.changesWritten)
        let elapsed = (ContinuousClock.now - started).components
        let nanoseconds = elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
        metrics.batch.recordNanoseconds(nanoseconds)
        logger.debug("batch settled", metadata: [
            "entries": "\(entries.count)", "done": "\(outcome.done.count)", "changes": "\(outcome.changesWritten)",
            "duration_ms": "\(nanoseconds / 1_000_000)",
        ])
        return outcome.retry.contains { $0.error.failure.waitsForStore }
    }

    /// Takes over entries that sat pending with any consumer longer than the idle timeout
    /// (a worker that died, or an entry whose processing failed), or dead-letters them after too many deliveries.
    func reclaim() async throws {
        // After an outage many entries wait at once: keep taking full pages (up to 64 of them) before reading new ones.
        for _ in 0..<64 {
            guard try await reclaimPage() == options.batchSize else { return }
        }
    }

    /// One page of `reclaim`; returns how many pending entries it looked at.
    private func reclaimPage() async throws -> Int {
        let idleMS = Int(options.claimIdle.nanoseconds / 1_000_000)
        let reply = try await redis.send(
            RedisCommand("XPENDING", [RedisArgument(stream), RedisArgument(group), "IDLE", RedisArgument(idleMS), "-", "+", RedisArgument(options.batchSize)]))
        var claim: [String] = []
        var exhausted: [(id: String, deliveries: Int)] = []
        let seen = reply.array?.count ?? 0
        for item in reply.array ?? [] {
            guard let fields = item.array, fields.count >= 4, let id = fields[0].string, let deliveries = fields[3].int else { continue }
            if deliveries >= options.maxDeliveries { exhausted.append((id, deliveries)) } else { claim.append(id) }
        }
        if !exhausted.isEmpty {
            // An event that failed only because the store was unreachable is not at fault: it waits in the stream
            // for the store to come back instead of going to the dead letters.
            let errors = try await redis.send(RedisCommand("HMGET", [RedisArgument(options.keys.webhookErrors)] + exhausted.map { RedisArgument($0.id) }))
            for (index, entry) in exhausted.enumerated() {
                let recorded = errors.array?[index].string
                let error = recorded.flatMap(EntryError.init(recorded:))
                if error?.failure.waitsForStore == true {
                    claim.append(entry.id)
                } else {
                    do {
                        try await deadLetter(
                            id: entry.id, deliveries: entry.deliveries, error: error?.description ?? recorded ?? "delivered \(entry.deliveries) times without success")
                    } catch {
                        // Redis refused the dead letter (at its maxmemory, most likely): the entry stays pending and is
                        // tried again next round; the reclaim of the others, and the draining, go on.
                        logger.warning("dead-lettering failed, will retry", metadata: ["entry": "\(entry.id)", "error": "\(error)"])
                    }
                }
            }
        }
        guard !claim.isEmpty else { return seen }
        let claimed = try await redis.send(
            RedisCommand("XCLAIM", [RedisArgument(stream), RedisArgument(group), RedisArgument(options.consumer), RedisArgument(idleMS)] + claim.map { RedisArgument($0) }))
        let entries = StreamEntry.parse(entries: claimed)
        // Entries deleted meanwhile come back without fields: ack them so they leave the pending list.
        let gone = Set(claim).subtracting(entries.map(\.id))
        if !gone.isEmpty {
            _ = try await redis.send(RedisCommand("XACK", [RedisArgument(stream), RedisArgument(group)] + gone.map { RedisArgument($0) }))
        }
        guard !entries.isEmpty else { return seen }
        metrics.reclaimed.increment(by: entries.count)
        logger.info("reclaimed pending events", metadata: ["count": "\(entries.count)"])
        // The store still failing: stop here, the next round tries again.
        return try await handle(entries) ? 0 : seen
    }

    func deadLetter(id: String, deliveries: Int, error: String) async throws {
        let now = Int(Date().timeIntervalSince1970 * 1000)
        let oldestKept = max(0, now - Int(options.deadLetterMaxAge.components.seconds) * 1000)
        let trimmed = try await redis.evaluate(
            WorkerScripts.deadLetter,
            keys: [RedisArgument(stream), RedisArgument(options.keys.deadLetterStream), RedisArgument(options.keys.webhookErrors)],
            arguments: [
                RedisArgument(group), RedisArgument(id), RedisArgument(deliveries), RedisArgument(String(error.prefix(500))), RedisArgument(now),
                RedisArgument(options.deadLetterMax), RedisArgument(String(oldestKept)),
            ]).int ?? 0
        metrics.deadLettered.increment()
        logger.error("event dead-lettered", metadata: ["entry": "\(id)", "deliveries": "\(deliveries)", "error": "\(error.prefix(200))"])
        if trimmed > 0 {
            metrics.deadLettersTrimmed.increment(by: trimmed)
            logger.warning("old dead letters trimmed", metadata: [
                "count": "\(trimmed)", "max": "\(options.deadLetterMax)", "max_age_days": "\(options.deadLetterMaxAge.components.seconds / 86_400)",
            ])
        }
    }

    /// Runs `work` while keeping the entries claimed by this consumer: every third of the claim timeout their idle time
    /// is reset (`XCLAIM … JUSTID`, which does not count a delivery), so a batch slower than the claim timeout (a slow
    /// Trello, rate-limit waits) is neither reclaimed by another worker nor processed twice.
    func whileClaimed<T: Sendable>(_ ids: [String], _ work: @escaping @Sendable () async -> T) async -> T {
        guard !ids.isEmpty else { return await work() }
        let every = Duration.nanoseconds(max(20_000_000, min(10_000_000_000, options.claimIdle.nanoseconds / 3)))
        let command = RedisCommand(
            "XCLAIM", [RedisArgument(stream), RedisArgument(group), RedisArgument(options.consumer), "0"] + ids.map { RedisArgument($0) } + ["JUSTID"])
        return await withTaskGroup(of: Void.self) { group in
            group.addTask { [redis, logger] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: every)
                    guard !Task.isCancelled else { return }
                    do {
                        _ = try await redis.send(command)
                    } catch {
                        logger.warning("batch lease heartbeat failed", metadata: ["error": "\(error)"])
                    }
                }
            }
            let value = await work()
            group.cancelAll()
            return value
        }
    }

    func recordStreamGauges() async {
        guard let replies = try? await redis.pipeline([
            RedisCommand("XLEN", [RedisArgument(stream)]),
            RedisCommand("XPENDING", [RedisArgument(stream), RedisArgument(group)]),
            RedisCommand("XLEN", [RedisArgument(options.keys.deadLetterStream)]),
            RedisCommand("XINFO", ["GROUPS", RedisArgument(stream)]),
        ]) else { return }
        if let length = replies[0].int { metrics.streamLength.record(length) }
        if let summary = replies[1].array {
            metrics.streamPending.record(summary.first?.int ?? 0)
            // The oldest pending entry's id starts with the milliseconds it was added at.
            if summary.count > 1, let oldest = summary[1].string, let millis = Double(oldest.split(separator: "-").first ?? "") {
                metrics.oldestPendingAge.record(max(0, Date().timeIntervalSince1970 - millis / 1000))
            } else {
                metrics.oldestPendingAge.record(0)
            }
        }
        if let dead = replies[2].int { metrics.deadLetters.record(dead) }
        for info in replies[3].array ?? [] {
            let map = info.fieldMap
            if map["name"]?.string == group, let lag = map["lag"]?.int { metrics.streamLag.record(lag) }
        }
    }
}

struct WorkerMetrics: Sendable {
    let processed = Counter(label: "roundup_worker_events_total", dimensions: [("result", "processed")])
    let dropped = Counter(label: "roundup_worker_events_total", dimensions: [("result", "dropped")])
    let retried = Counter(label: "roundup_worker_events_total", dimensions: [("result", "retry")])
    let deadLettered = Counter(label: "roundup_worker_events_total", dimensions: [("result", "dead_letter")])
    let changes = Counter(label: "roundup_worker_changes_written_total")
    let reclaimed = Counter(label: "roundup_worker_reclaimed_total")
    let batch = Metrics.Timer(label: "roundup_worker_batch_duration_seconds")
    let streamLength = Gauge(label: "roundup_stream_length", dimensions: [("stream", "webhooks")])
    let streamPending = Gauge(label: "roundup_stream_pending", dimensions: [("stream", "webhooks")])
    let deadLetters = Gauge(label: "roundup_stream_dead_letters")
    /// Dead letters removed by the retention bounds (count and age).
    let deadLettersTrimmed = Counter(label: "roundup_dead_letters_trimmed_total")
    /// Writes Redis refused while a batch was settled (pushes, last errors), most likely at its maxmemory.
    let settleWritesRefused = Counter(label: "roundup_worker_redis_writes_refused_total")
    let streamLag = Gauge(label: "roundup_stream_lag", dimensions: [("stream", "webhooks")])
    let oldestPendingAge = Gauge(label: "roundup_stream_oldest_pending_age_seconds", dimensions: [("stream", "webhooks")])
}
