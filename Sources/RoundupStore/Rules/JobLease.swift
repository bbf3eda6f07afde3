package import Foundation
package import RoundupCore

/// The row of `sync_lease`: which job holds the account's lease, which worker runs it (`api` while the job is queued,
/// until one picks it up), and when that worker last beat.
package struct JobLeaseRow: Sendable, Equatable {
    package var accountID: String
    package var jobID: String
    package var holder: String
    package var expiresAt: String
    package var updatedAt: String

    /// The holder a lease names before any worker has picked its job up.
    package static let unclaimed = "api"
}

/// A job's progress to store with a heartbeat.
package struct JobProgress: Sendable, Equatable {
    package var resultsJSON: String
    package var processed: Int
    package var total: Int?
}

/// The rows `JobLease` reads and writes. SQLite answers each call with a statement in its write transaction;
/// PostgreSQL reads the rows a call needs up front (under the account's lock) and writes them back afterwards.
package protocol JobLeaseRows {
    mutating func job(id: String) throws -> SyncJob?
    mutating func job(accountID: String, idempotencyKey: String) throws -> SyncJob?
    mutating func lease(accountID: String) throws -> JobLeaseRow?
    mutating func insertJob(_ job: SyncJob, idempotencyKey: String?) throws
    /// Sets a job's status and error: ends it (the rule ends only queued or running ones), or starts a queued one
    /// (`startJob`); `at` moves its `updated_at`, nil leaves it.
    mutating func endJob(id: String, status: JobStatus, error: String?, at now: String?) throws
    /// Moves the job's heartbeat, storing its progress when given.
    mutating func touchJob(id: String, at now: String, progress: JobProgress?) throws
    mutating func putLease(_ lease: JobLeaseRow) throws
    mutating func removeLease(accountID: String) throws
    mutating func insertActivity(accountID: String, _ activity: NewActivity, now: String) throws
}

extension JobLeaseRows {
    /// A queued job starts: `running` from `now` (its heartbeat counts from then).
    mutating func startJob(id: String, at now: String) throws { try endJob(id: id, status: .running, error: nil, at: now) }
}

/// The job lease, once for both stores: at most one sync or import job is queued or runs per account; a job is
/// `queued` from its submission until a worker starts it, then `running`; a running job whose heartbeat has not moved
/// for `staleAfter` seconds has lost its worker, is given up as stale and never resumed. A queued job is never stale
/// for waiting its turn; only one still queued after `JobHeartbeat.queuedLimit` is taken for lost (its stream entry
/// gone) and given up the same way. A reconciliation takes no lease (a per-list lock in Redis keeps runs of one list
/// apart).
package struct JobLease {
    package var staleAfter: TimeInterval
    package var now: Date

    package init(staleAfter: TimeInterval, now: Date) {
        self.staleAfter = staleAfter
        self.now = now
    }

    private var nowText: String { Timestamp.string(now) }
    private var expires: String { Timestamp.string(now.addingTimeInterval(staleAfter)) }
    /// When a queued job's lease lapses if no worker starts it (`JobHeartbeat.queuedLimit`).
    private var queuedExpires: String { Timestamp.string(now.addingTimeInterval(JobHeartbeat.queuedLimit(staleAfter: staleAfter))) }

    package func submit<Rows: JobLeaseRows>(
        accountID: String, kind: JobKind, deviceID: String?, idempotencyKey: String?, payload: JSONValue, total: Int, rows: inout Rows
    ) throws -> JobSubmission {
        if let key = idempotencyKey, let existing = try rows.job(accountID: accountID, idempotencyKey: key) { return .replayed(existing) }
        let takesLease = kind != .reconcile
        if takesLease, let lease = try rows.lease(accountID: accountID) {
            // A job queued or running holds the account: busy, unless it is stale (its worker gone, or its entry lost).
            if let holding = try rows.job(id: lease.jobID), !holding.status.hasEnded {
                if !holding.isStale(now: now, staleAfter: staleAfter) { return .busy(runningJobID: lease.jobID) }
                try rows.endJob(id: lease.jobID, status: .error, error: JobOutcome.stale.rawValue, at: nil)
            }
            try rows.removeLease(accountID: accountID)
        }
        let job = SyncJob(
            id: Hex.lowercase(UUID()), accountID: accountID, kind: kind, status: .queued, deviceID: deviceID, processed: 0, total: total,
            payload: payload, results: [], error: nil, createdAt: nowText, updatedAt: nowText)
        try rows.insertJob(job, idempotencyKey: idempotencyKey)
        if takesLease {
            try rows.putLease(
                JobLeaseRow(accountID: accountID, jobID: job.id, holder: JobLeaseRow.unclaimed, expiresAt: queuedExpires, updatedAt: nowText))
        }
        return .created(job)
    }

    /// A worker (`holder`) picks up a job from the stream: a queued job starts (`running`, its heartbeat from now); a
    /// running one is taken over from a worker gone quiet.
    package func start<Rows: JobLeaseRows>(jobID: String, holder: String, rows: inout Rows) throws -> JobStart {
        guard var job = try rows.job(id: jobID) else { return .skip(.noSuchJob) }
        guard !job.status.hasEnded else { return .skip(.ended(job.status)) }
        if job.isStale(now: now, staleAfter: staleAfter) {
            // The app has been told: it stopped polling and may have resubmitted. Never resume it.
            try giveUpStale(job, rows: &rows)
            return .skip(.stale)
        }
        if job.kind != .reconcile {
            let lease = try rows.lease(accountID: job.accountID)
            if let lease, lease.jobID != jobID {
                try rows.endJob(id: jobID, status: .error, error: "lease lost", at: nowText)
                return .skip(.leaseHeldByAnother)
            }
            // Its stream entry looked idle, but the worker running it still beats: leave it to that worker.
            if let lease, lease.holder != holder, lease.holder != JobLeaseRow.unclaimed,
                let beat = Timestamp.date(lease.updatedAt), now.timeIntervalSince(beat) < staleAfter / 4
            {
                return .skip(.runningOn(holder: lease.holder))
            }
            try rows.putLease(JobLeaseRow(accountID: job.accountID, jobID: jobID, holder: holder, expiresAt: expires, updatedAt: nowText))
        }
        if job.status == .queued {
            try rows.startJob(id: jobID, at: nowText)
            job.status = .running
        } else {
            try rows.touchJob(id: jobID, at: nowText, progress: nil)
        }
        job.updatedAt = nowText
        return .run(job)
    }

    /// Moves the heartbeat (storing progress, when given), unless the job is no longer running, already reads as
    /// stale, or is no longer this holder's (another worker took it over: the lease names that worker now). False
    /// tells the worker to stop.
    package func beat<Rows: JobLeaseRows>(jobID: String, holder: String, rows: inout Rows) throws -> Bool {
        guard let job = try rows.job(id: jobID) else { return false }
        return try beat(job, holder: holder, progress: nil, rows: &rows)
    }

    private func beat<Rows: JobLeaseRows>(_ job: SyncJob, holder: String, progress: JobProgress?, rows: inout Rows) throws -> Bool {
        let jobID = job.id
        guard job.status == .running else { return false }
        if job.isStale(now: now, staleAfter: staleAfter) {
            try giveUpStale(job, rows: &rows)
            return false
        }
        var lease: JobLeaseRow?
        if job.kind != .reconcile {
            guard let held = try rows.lease(accountID: job.accountID), held.jobID == jobID, held.holder == holder else { return false }
            lease = held
        }
        try rows.touchJob(id: jobID, at: nowText, progress: progress)
        if var lease {
            lease.expiresAt = expires
            lease.updatedAt = nowText
            try rows.putLease(lease)
        }
        return true
    }

    /// Stores one item's result (at `index`, or appended) with the heartbeat; false as `beat`.
    package func record<Rows: JobLeaseRows>(
        jobID: String, holder: String, index: Int, result: SyncItemResult, total: Int?, rows: inout Rows
    ) throws -> Bool {
        guard let job = try rows.job(id: jobID) else { return false }
        var results = job.results
        if index < results.count { results[index] = result } else { results.append(result) }
        let progress = JobProgress(resultsJSON: JSONValue.array(results.map(\.json)).canonicalJSON, processed: results.count, total: total)
        guard try beat(job, holder: holder, progress: progress, rows: &rows) else { return false }
        // An item that wrote nothing says so in the history; what an item wrote, the write itself recorded.
        if let activity = result.activity(item: job.storedItem(at: index), jobID: jobID) {
            try rows.insertActivity(accountID: job.accountID, activity, now: nowText)
        }
        return true
    }

    /// Gives a running job's turn back (jobs of other accounts wait for a worker): `queued` again from now, its lease
    /// kept for the account but unclaimed so any worker may start it, its results and `processed` kept (it resumes
    /// where it stopped). False when the job is no longer this holder's running job.
    package func yield<Rows: JobLeaseRows>(jobID: String, holder: String, rows: inout Rows) throws -> Bool {
        guard let job = try rows.job(id: jobID), job.status == .running, job.kind != .reconcile,
            let held = try rows.lease(accountID: job.accountID), held.jobID == jobID, held.holder == holder
        else { return false }
        // The app has been told it is stale (its heartbeat stopped): it is not brought back.
        if job.isStale(now: now, staleAfter: staleAfter) {
            try giveUpStale(job, rows: &rows)
            return false
        }
        try rows.endJob(id: jobID, status: .queued, error: nil, at: nowText)
        try rows.putLease(
            JobLeaseRow(accountID: job.accountID, jobID: jobID, holder: JobLeaseRow.unclaimed, expiresAt: queuedExpires, updatedAt: nowText))
        return true
    }

    /// Ends the job (completed or error; a queued one too: its entry could not be queued) and releases the lease.
    package func finish<Rows: JobLeaseRows>(jobID: String, status: JobStatus, error: String?, rows: inout Rows) throws {
        guard let job = try rows.job(id: jobID) else { return }
        // A job ended already (given up as stale by another worker, say) keeps its end.
        if !job.status.hasEnded { try rows.endJob(id: jobID, status: status, error: error, at: nowText) }
        try release(job, rows: &rows)
    }

    private func giveUpStale<Rows: JobLeaseRows>(_ job: SyncJob, rows: inout Rows) throws {
        try rows.endJob(id: job.id, status: .error, error: JobOutcome.stale.rawValue, at: nil)
        try release(job, rows: &rows)
    }

    private func release<Rows: JobLeaseRows>(_ job: SyncJob, rows: inout Rows) throws {
        if let lease = try rows.lease(accountID: job.accountID), lease.jobID == job.id { try rows.removeLease(accountID: job.accountID) }
    }
}
