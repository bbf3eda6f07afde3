public import Foundation
public import Logging
import Metrics
public import RoundupStore
public import ServiceLifecycle

/// Deletes activity older than the retention, every `interval`, in batches (so one run never holds the store's write
/// lock for long). Several workers pruning at once only share the work.
public struct ActivityPruner: Service {
    let store: any ActivityRepository
    let retentionDays: Int
    let interval: Duration
    let batch: Int
    let logger: Logger

    public init(store: any ActivityRepository, retentionDays: Int, interval: Duration = .seconds(3600), batch: Int = 5000, logger: Logger) {
        self.store = store
        self.retentionDays = retentionDays
        self.interval = interval
        self.batch = batch
        self.logger = logger
    }

    /// Deletes every row older than the retention; returns how many went.
    public func prune(now: Date = Date()) async throws -> Int {
        let cutoff = now.addingTimeInterval(-Double(retentionDays) * 86_400)
        var total = 0
        while !Task.isShuttingDownGracefully {
            let deleted = try await store.pruneActivity(before: cutoff, batch: batch)
            total += deleted
            if deleted < batch { break }
        }
        if total > 0 {
            Counter(label: "roundup_activity_pruned_total").increment(by: total)
            logger.info("activity pruned", metadata: ["rows": "\(total)", "retention_days": "\(retentionDays)"])
        }
        return total
    }

    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                _ = try await prune()
            } catch {
                logger.warning("pruning activity failed", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
