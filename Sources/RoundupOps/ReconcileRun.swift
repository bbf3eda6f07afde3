public import Foundation
import RoundupCore
public import RoundupJobs
public import RoundupStore

/// `roundupctl reconcile`: a reconciliation job for one list or every list, queued through `JobQueue` as the API
/// queues one (a worker runs it), and, when asked, waited for.
public struct ReconcileRun: Sendable {
    let store: any OperatorStore & ReconcileStore
    let queue: JobQueue
    let staleAfter: TimeInterval

    public init(store: any OperatorStore & ReconcileStore, queue: JobQueue, staleAfter: TimeInterval) {
        self.store = store
        self.queue = queue
        self.staleAfter = staleAfter
    }

    /// The lists to reconcile: the one named (none when it does not exist), or every list.
    public func lists(_ id: String?) async throws -> [SyncListRecord] {
        try await store.allSyncLists().map(\.list).filter { id == nil || $0.id == id }
    }

    /// Queues a job per list; a list whose account runs another job is passed over (the scheduled reconciliation
    /// comes to it). Returns the jobs queued, with their lists.
    public func queue(_ lists: [SyncListRecord]) async throws -> [(job: String, list: SyncListRecord)] {
        var queued: [(job: String, list: SyncListRecord)] = []
        for list in lists {
            guard
                case .created(let job) = try await queue.submit(
                    accountID: list.accountID, kind: .reconcile, payload: .object(["sync_list_id": .string(list.id)]), total: 1)
            else { continue }
            queued.append((job.id, list))
        }
        return queued
    }

    /// The jobs as the store has them now.
    public func jobs(_ ids: [String]) async throws -> [JobRecord] {
        var jobs: [JobRecord] = []
        for id in ids { jobs += try await store.jobs(limit: 1, id: id) }
        return jobs
    }

    /// Reads the jobs every half second until none is under way; `progress` is told each new `reconciled n/m list(s),
    /// k failed`. Returns them as they ended.
    public func waitUntilEnded(_ ids: [String], progress: (String) -> Void) async throws -> [JobRecord] {
        var last = ""
        while true {
            let jobs = try await jobs(ids)
            let now = Date()
            let underWay = jobs.filter { JobsReport.isUnderWay($0, now: now, staleAfter: staleAfter) }.count
            guard underWay > 0 else { return jobs }
            let failed = jobs.filter { JobsReport.failed($0, now: now, staleAfter: staleAfter) }.count
            let line = "reconciled \(jobs.count - underWay)/\(jobs.count) list(s), \(failed) failed"
            if line != last { progress(line) }
            last = line
            try await Task.sleep(for: .milliseconds(500))
        }
    }
}
