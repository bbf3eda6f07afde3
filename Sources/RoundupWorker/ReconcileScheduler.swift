public import Foundation
public import Logging
import Metrics
import RoundupCore
public import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
public import ServiceLifecycle

/// Reconciles every synced list every `interval`, each at its own offset within the interval (so lists do not all
/// fire at once), one list at a time per worker and — through the reconciler's lock — one run per list across all
/// workers. Yields while the webhook stream has a backlog; skips accounts flagged for their user.
/// The lists come from the reconciler's store, the backlog from its Redis.
public struct ReconcileScheduler: Service {
    let reconciler: Reconciler
    let interval: TimeInterval
    let tick: Duration
    let logger: Logger

    public init(reconciler: Reconciler, interval: TimeInterval, tick: Duration = .seconds(5), logger: Logger) {
        self.reconciler = reconciler
        self.interval = interval
        self.tick = tick
        self.logger = logger
    }

    /// A stable offset in [0, interval) from the list id (Swift's own hash differs per process).
    static func offset(_ id: String, interval: TimeInterval) -> TimeInterval {
        var hash: UInt64 = 1_469_598_103_934_665_603
        for byte in id.utf8 { hash = (hash ^ UInt64(byte)) &* 1_099_511_628_211 }
        return Double(hash % 1_000_000) / 1_000_000 * interval
    }

    func due(_ list: SyncListRecord, now: Date) -> Bool {
        if let last = list.lastReconciledAt.flatMap(Timestamp.date) { return now.timeIntervalSince(last) >= interval }
        let created = list.createdAt.flatMap(Timestamp.date) ?? now
        return now.timeIntervalSince(created) >= Self.offset(list.id, interval: interval)
    }

    /// Reconciles the lists of the boards whose labels changed (`RedisKeys.reconcileRequests`): each request is taken by
    /// one worker (`SPOP`); a list reconciled by another worker at the same moment is left to it.
    func runRequested() async {
        guard let reply = try? await reconciler.redis.send(RedisCommand("SPOP", [RedisArgument(reconciler.keys.reconcileRequests), "50"])),
            let members = reply.array, !members.isEmpty
        else { return }
        var again: [String] = []
        for member in members {
            guard let text = member.string else { continue }
            let parts = text.split(separator: "\t", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            guard !Task.isShuttingDownGracefully, let lists = try? await reconciler.store.syncLists(accountID: parts[0]) else {
                again.append(text)
                continue
            }
            for list in lists where list.trelloBoardID == parts[1] {
                do {
                    _ = try await reconciler.run(list, wait: .seconds(5))
                } catch Reconciler.Failure.busy {
                    // Another run holds the list, for long: asked again at a tick (this worker's or another's).
                    if !again.contains(text) { again.append(text) }
                } catch {
                    // Failed (credentials, Trello): the scheduled reconciliation and the account's flag take it from here.
                    logger.warning("reconciliation after a label change failed", metadata: ["list": "\(list.id)", "error": "\(error)"])
                }
            }
        }
        if !again.isEmpty {
            _ = try? await reconciler.redis.send(
                RedisCommand("SADD", [RedisArgument(reconciler.keys.reconcileRequests)] + again.map { RedisArgument($0) }))
        }
    }

    public func run() async throws {
        var retryAfter: [String: Date] = [:]
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            // Woken at once by a graceful shutdown, so stopping the worker does not wait out the tick.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: tick) }
            if Task.isShuttingDownGracefully || Task.isCancelled { break }
            await runRequested()
            guard interval > 0 else { continue }
            // Webhooks first: with a backlog on the stream, wait for the next tick.
            if let backlog = try? await reconciler.redis.length(of: .webhooks, keys: reconciler.keys),
                backlog > 1000
            {
                continue
            }
            guard let lists = try? await reconciler.store.allSyncLists() else { continue }
            let now = Date()
            var oldest = 0.0
            for (list, flagged) in lists where !flagged {
                let last = list.lastReconciledAt.flatMap(Timestamp.date) ?? list.createdAt.flatMap(Timestamp.date) ?? now
                oldest = max(oldest, now.timeIntervalSince(last))
            }
            Gauge(label: "roundup_reconcile_oldest_age_seconds").record(oldest)
            for (list, flagged) in lists where !flagged && due(list, now: now) {
                if let wait = retryAfter[list.id], wait > now { continue }
                if Task.isShuttingDownGracefully { break }
                do {
                    _ = try await reconciler.run(list, skipIfReconciledWithin: interval / 2)
                    retryAfter[list.id] = nil
                } catch Reconciler.Failure.busy {
                    continue  // another worker has it
                } catch {
                    retryAfter[list.id] = now.addingTimeInterval(min(interval, 60))
                    logger.warning("reconciliation failed", metadata: ["list": "\(list.id)", "error": "\(error)"])
                }
            }
        }
    }
}
