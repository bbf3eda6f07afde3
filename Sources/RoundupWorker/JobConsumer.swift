import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupSync
import ServiceLifecycle

/// The worker's loop on the job stream: runs up to `concurrency` sync and import jobs at once, each with its
/// heartbeat; takes over jobs whose worker died (their entries sat idle) — resuming them from `processed`
/// unless they already read as stale, which the app has been told and will have resubmitted.
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

    let options: Options
    let redis: RedisClient
    let store: any OutboundStore
    let engine: SyncEngine
    let logger: Logger

    public init(options: Options, redis: RedisClient, store: any OutboundStore, engine: SyncEngine, logger: Logger) {
        self.options = options
        self.redis = redis
        self.store = store
        self.engine = engine
        self.logger = logger
    }

    var stream: String { options.keys.jobStream }
    var group: String { options.keys.workerGroup }

    public func run() async throws {
        let running = RunningJobs()
        await withDiscardingTaskGroup { tasks in
            var reader: RedisConnection?
            var lastReclaim = ContinuousClock.now - .seconds(3600)
            var backoff = Duration.milliseconds(100)
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                do {
                    if reader == nil || reader?.isActive == false {
                        try await redis.createGroupIfMissing(stream: stream, group: group)
                        reader = try await redis.dedicatedConnection().get()
                    }
                    var claimed: [StreamEntry] = []
                    if ContinuousClock.now - lastReclaim >= .seconds(2) {
                        lastReclaim = .now
                        claimed = try await reclaim(limit: max(0, options.concurrency - running.count))
                        await recordGauges(running: running.count)
                    }
                    let free = options.concurrency - running.count - claimed.count
                    var entries = claimed
                    if free > 0 {
                        let arguments: [RedisArgument] = [
                            "GROUP", RedisArgument(group), RedisArgument(options.consumer), "COUNT", RedisArgument(free), "BLOCK", "1000",
                            "STREAMS", RedisArgument(stream), ">",
                        ]
                        let reply = try await reader!.send(RedisCommand("XREADGROUP", arguments), timeout: TimeAmount.seconds(6)).get()
                        entries += StreamEntry.parse(read: reply)
                    } else {
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    for entry in entries where !running.contains(entry.id) {
                        running.add(entry.id)
                        tasks.addTask {
                            await self.handle(entry)
                            running.remove(entry.id)
                        }
                    }
                    backoff = .milliseconds(100)
                } catch {
                    if Task.isShuttingDownGracefully { break }
                    logger.warning("job loop error", metadata: ["error": "\(error)"])
                    reader?.close().whenComplete { _ in }
                    reader = nil
                    try? await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, .seconds(5))
                }
            }
            reader?.close().whenComplete { _ in }
            // Jobs in flight stop after their current item (they see the graceful shutdown) and stay pending.
        }
        logger.notice("job consumer stopped", metadata: ["consumer": "\(options.consumer)"])
    }


    /// Entries idle longer than the claim timeout: their worker died (a live one refreshes them with each heartbeat).
    func reclaim(limit: Int) async throws -> [StreamEntry] {
        guard limit > 0 else { return [] }
        let idle = Int(options.claimIdle.nanoseconds / 1_000_000)
        let reply = try await redis.send(RedisCommand("XAUTOCLAIM", [
            RedisArgument(stream), RedisArgument(group), RedisArgument(options.consumer), RedisArgument(idle), "0-0", "COUNT", RedisArgument(limit),
        ]))
        guard let parts = reply.array, parts.count >= 2 else { return [] }
        let entries = StreamEntry.parse(entries: parts[1])
        if !entries.isEmpty { logger.info("reclaimed jobs", metadata: ["count": "\(entries.count)"]) }
        return entries
    }

    func handle(_ entry: StreamEntry) async {
        guard let jobID = entry.string("job") else {
            await redis.acknowledgeAndDelete(stream: stream, group: group, ids: [entry.id])
            return
        }
        let start: JobStart
        do {
            start = try await store.startJob(id: jobID, holder: options.consumer, staleAfter: options.staleAfter)
        } catch {
            logger.warning("job could not be started; it will be reclaimed", metadata: ["job": "\(jobID)", "error": "\(error)"])
            return
        }
        switch start {
        case .skip(let reason):
            if reason == "stale" { Counter(label: "roundup_sync_jobs_total", dimensions: [("kind", entry.string("kind") ?? "sync"), ("status", "stale")]).increment() }
            logger.info("job skipped", metadata: ["job": "\(jobID)", "reason": "\(reason)"])
            await redis.acknowledgeAndDelete(stream: stream, group: group, ids: [entry.id])
        case .run(let job):
            let outcome = await engine.run(job, holder: options.consumer) {
                // Keeps the entry from looking idle, so no other worker takes over a live job.
                _ = try? await self.redis.send(RedisCommand("XCLAIM", [
                    RedisArgument(self.stream), RedisArgument(self.group), RedisArgument(self.options.consumer), "0", RedisArgument(entry.id), "JUSTID",
                ]))
            }
            if outcome != .interrupted { await redis.acknowledgeAndDelete(stream: stream, group: group, ids: [entry.id]) }
        }
    }

    /// `roundup_stream_*{stream="jobs"}` and the jobs running here.
    func recordGauges(running: Int) async {
        Gauge(label: "roundup_sync_jobs_running").record(running)
        guard let replies = try? await redis.pipeline([
            RedisCommand("XLEN", [RedisArgument(stream)]),
            RedisCommand("XPENDING", [RedisArgument(stream), RedisArgument(group)]),
        ]) else { return }
        if let length = replies[0].int { Gauge(label: "roundup_stream_length", dimensions: [("stream", "jobs")]).record(length) }
        if let summary = replies[1].array {
            Gauge(label: "roundup_stream_pending", dimensions: [("stream", "jobs")]).record(summary.first?.int ?? 0)
            if summary.count > 1, let oldest = summary[1].string, let millis = Double(oldest.split(separator: "-").first ?? "") {
                Gauge(label: "roundup_stream_oldest_pending_age_seconds", dimensions: [("stream", "jobs")]).record(max(0, Date().timeIntervalSince1970 - millis / 1000))
            } else {
                Gauge(label: "roundup_stream_oldest_pending_age_seconds", dimensions: [("stream", "jobs")]).record(0)
            }
        }
    }

}

/// Stream entries whose jobs run in this process.
final class RunningJobs: Sendable {
    private let ids = NIOLockedValueBox(Set<String>())
    var count: Int { ids.withLockedValue { $0.count } }
    func contains(_ id: String) -> Bool { ids.withLockedValue { $0.contains(id) } }
    func add(_ id: String) { _ = ids.withLockedValue { $0.insert(id) } }
    func remove(_ id: String) { _ = ids.withLockedValue { $0.remove(id) } }
}
