public import Foundation
import Logging
import PostgresNIO
public import RoundupCore
public import RoundupStore

/// Sync jobs, the account lease, mappings, conflicts and duplicates, on PostgreSQL (as `SQLiteStore+Sync`).
/// Every write to a job or the lease first takes its account's advisory lock (`lockAccounts`).
extension PostgresStore: SyncJobStore {
    static func fetchJob(_ c: PostgresConnection, id: String, logger: Logger) async throws -> SyncJob? {
        try await c.rows("SELECT \(unescaped: SyncJob.columns) FROM background_jobs WHERE id = \(id)", logger).first.map(SyncJob.init(stored:))
    }

    public func submitJob(
        accountID: String, kind: JobKind, deviceID: String?, idempotencyKey: String?, payload: JSONValue, total: Int, staleAfter: TimeInterval
    ) async throws -> JobSubmission {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await write { [self] c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            var rows = try await PostgresJobLeaseRows.load(c, accountID: accountID, idempotencyKey: idempotencyKey, logger: logger)
            let submission = try lease.submit(
                accountID: accountID, kind: kind, deviceID: deviceID, idempotencyKey: idempotencyKey, payload: payload, total: total, rows: &rows)
            try await rows.flush(c, logger: logger)
            return submission
        }
    }

    public func job(accountID: String, id: String) async throws -> SyncJob? {
        try await read { [self] c in
            try await c.rows(
                "SELECT \(unescaped: SyncJob.columns) FROM background_jobs WHERE id = \(id) AND account_id = \(accountID)", logger
            ).first.map(SyncJob.init(stored:))
        }
    }

    /// Runs a rule of `JobLease` on one job, under its account's lock.
    private func withJobLease<T: Sendable>(
        jobID: String, staleAfter: TimeInterval, _ body: @escaping @Sendable (JobLease, inout PostgresJobLeaseRows) throws -> T
    ) async throws -> T {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await write { [self] c in
            try await Self.lockJobAccount(c, jobID: jobID, logger: logger)
            var rows = try await PostgresJobLeaseRows.load(c, jobID: jobID, logger: logger)
            let result = try body(lease, &rows)
            try await rows.flush(c, logger: logger)
            return result
        }
    }

    public func startJob(id: String, holder: String, staleAfter: TimeInterval) async throws -> JobStart {
        try await withJobLease(jobID: id, staleAfter: staleAfter) { lease, rows in try lease.start(jobID: id, holder: holder, rows: &rows) }
    }

    public func heartbeat(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool {
        try await withJobLease(jobID: jobID, staleAfter: staleAfter) { lease, rows in try lease.beat(jobID: jobID, holder: holder, rows: &rows) }
    }

    public func yieldJob(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool {
        try await withJobLease(jobID: jobID, staleAfter: staleAfter) { lease, rows in try lease.yield(jobID: jobID, holder: holder, rows: &rows) }
    }

    public func recordResult(
        jobID: String, holder: String, index: Int, result: SyncItemResult, total: Int?, staleAfter: TimeInterval
    ) async throws -> Bool {
        try await withJobLease(jobID: jobID, staleAfter: staleAfter) { lease, rows in
            try lease.record(jobID: jobID, holder: holder, index: index, result: result, total: total, rows: &rows)
        }
    }

    public func finishJob(jobID: String, status: JobStatus, error: String?) async throws {
        try await withJobLease(jobID: jobID, staleAfter: 0) { lease, rows in try lease.finish(jobID: jobID, status: status, error: error, rows: &rows)
        }
    }

    // MARK: Mappings

    public func task(accountID: String, cardID: String) async throws -> SyncTaskRecord? {
        try await read { [self] c in
            try await c.rows(
                "SELECT \(unescaped: SyncTaskRecord.columns) FROM sync_tasks WHERE account_id = \(accountID) AND trello_card_id = \(cardID)", logger
            ).first.map(SyncTaskRecord.init(stored:))
        }
    }

    public func tasks(accountID: String, reminderID: String) async throws -> [SyncTaskRecord] {
        try await read { [self] c in
            try await c.rows(
                """
                SELECT \(unescaped: SyncTaskRecord.columns) FROM sync_tasks WHERE account_id = \(accountID) AND reminder_id = \(reminderID)
                ORDER BY updated_at DESC, id DESC
                """,
                logger
            ).map(SyncTaskRecord.init(stored:))
        }
    }

    public func mappedCardIDs(accountID: String, syncListID: String) async throws -> Set<String> {
        try await read { [self] c in
            Set(
                try await c.rows(
                    """
                    SELECT trello_card_id FROM sync_tasks
                    WHERE account_id = \(accountID) AND sync_list_id = \(syncListID) AND reminder_id IS NOT NULL AND deleted = false
                    """,
                    logger
                ).map { try $0.text(0) })
        }
    }

    public func unackedChange(accountID: String, cardID: String) async throws -> PendingChange? {
        try await read { [self] c in
            try await c.changes(
                """
                SELECT \(unescaped: PendingChange.columns) FROM pending_changes p
                WHERE p.account_id = \(accountID) AND p.trello_card_id = \(cardID) AND NOT p.superseded ORDER BY p.id DESC LIMIT 1
                """,
                into: PendingChangeList(accountID: accountID), logger
            ).changes.first
        }
    }

    public func reserveCreate(accountID: String, syncListID: String, reminderID: String) async throws {
        let now = Timestamp.now()
        let placeholder = SyncTaskRecord.placeholderPrefix + reminderID
        try await write { [self] c in
            _ = try await c.run(
                """
                INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, deleted, created_at, updated_at)
                VALUES (\(accountID), \(syncListID), \(placeholder), \(reminderID), '{}', true, \(now), \(now))
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET updated_at = excluded.updated_at
                """,
                logger)
        }
    }

    public func releaseCreate(accountID: String, reminderID: String) async throws {
        let placeholder = SyncTaskRecord.placeholderPrefix + reminderID
        try await write { [self] c in
            _ = try await c.run("DELETE FROM sync_tasks WHERE account_id = \(accountID) AND trello_card_id = \(placeholder)", logger)
        }
    }

    public func recordSyncWrite(_ w: SyncWrite) async throws -> [Int64] {
        let now = Date()
        return try await write { [self] c in
            let keys = [AccountScoped(w.accountID, w.cardID)]
            try await Self.lockAccounts(c, [w.accountID], logger: logger)
            var rows = try await PostgresChangeRows.load(c, keys: keys, logger: logger)
            if !w.conflicts.isEmpty { try await rows.loadOpenConflicts(c, keys: keys, logger: logger) }
            var applier = ChangeApplier(rows: rows)
            let ids = try applier.record(w, now: now)
            var inserted = try await applier.rows.flush(c, logger: logger).makeIterator()
            return ids.compactMap { $0 ?? inserted.next() }
        }
    }

    // MARK: Duplicates and conflicts

    public func addDuplicate(accountID: String, _ d: NewDuplicate) async throws -> Int64 {
        let now = Timestamp.now()
        let fields = JSONValue.object(d.fields).canonicalJSON
        return try await write { [self] c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            let stored = try await c.rows(
                """
                SELECT id, status FROM potential_duplicates WHERE account_id = \(accountID) AND reminder_id = \(d.reminderID) ORDER BY id
                FOR UPDATE
                """, logger
            ).map { (id: try $0.int64(0), status: try $0.value(1, as: DuplicateStatus.self)) }
            if let id = PotentialDuplicates.rewritten(among: stored) {
                _ = try await c.run(
                    """
                    UPDATE potential_duplicates SET trello_card_id = \(d.cardID), title = \(d.title), due_date = \(d.dueDate), fields = \(fields), job_id = \(d.jobID)
                    WHERE id = \(id)
                    """,
                    logger)
                return id
            }
            let inserted = try await c.rows(
                """
                INSERT INTO potential_duplicates (account_id, sync_list_id, reminder_id, trello_card_id, title, due_date, job_id, status, created_at, fields)
                VALUES (\(accountID), \(d.syncListID), \(d.reminderID), \(d.cardID), \(d.title), \(d.dueDate), \(d.jobID), \(DuplicateStatus.open.rawValue), \(now),
                    \(fields))
                RETURNING id
                """,
                logger)
            return try inserted[0].int64(0)
        }
    }

    public func conflict(accountID: String, id: Int64) async throws -> ConflictDetail? {
        try await read { [self] c in
            try await c.rows("SELECT \(unescaped: ConflictDetail.columns) FROM conflicts WHERE account_id = \(accountID) AND id = \(id)", logger)
                .first.map(ConflictDetail.init(stored:))
        }
    }

    public func resolveConflict(accountID: String, id: Int64, resolution: ConflictChoice) async throws -> Bool {
        let now = Timestamp.now()
        return try await write { [self] c in
            guard try await lockOpen(c, .conflicts, accountID: accountID, id: id) else { return false }
            return try await c.run(
                """
                UPDATE conflicts SET status = \(ConflictStatus.resolved.rawValue), resolution = \(resolution.rawValue), resolved_at = \(now)
                WHERE id = \(id) RETURNING 1
                """,
                logger) == 1
        }
    }

    /// Whether the conflict or duplicate may be resolved by the rule (`ResolutionTable.isOpen`), its row locked for the
    /// rest of the transaction.
    private func lockOpen(_ c: PostgresConnection, _ table: ResolutionTable, accountID: String, id: Int64) async throws -> Bool {
        guard
            let row = try await c.rows(
                "SELECT status FROM \(unescaped: table.rawValue) WHERE account_id = \(accountID) AND id = \(id) FOR UPDATE", logger
            ).first
        else { return false }
        return try table.isOpen(row.text(0))
    }

    public func duplicate(accountID: String, id: Int64) async throws -> DuplicateDetail? {
        try await read { [self] c in
            try await c.rows(
                "SELECT \(unescaped: DuplicateDetail.columns) FROM potential_duplicates WHERE account_id = \(accountID) AND id = \(id)", logger
            )
            .first.map(DuplicateDetail.init(stored:))
        }
    }

    /// Claims an open conflict or duplicate for one resolution at a time, by `ResolutionClaim`: the row is read under its
    /// lock (`FOR UPDATE`), so two claims cannot both succeed.
    public func claimResolution(accountID: String, table: ResolutionTable, id: Int64) async throws -> Bool {
        let rule = ResolutionClaim()
        return try await write { [self] c in
            guard
                let row = try await c.rows(
                    "SELECT status, resolving_at FROM \(unescaped: table.rawValue) WHERE account_id = \(accountID) AND id = \(id) FOR UPDATE", logger
                ).first,
                let stamp = rule.claim(open: try table.isOpen(row.text(0)), heldSince: try row.optionalText(1))
            else { return false }
            return try await c.run("UPDATE \(unescaped: table.rawValue) SET resolving_at = \(stamp) WHERE id = \(id) RETURNING 1", logger) == 1
        }
    }

    public func releaseResolution(accountID: String, table: ResolutionTable, id: Int64) async throws {
        try await write { [self] c in
            _ = try await c.run("UPDATE \(unescaped: table.rawValue) SET resolving_at = NULL WHERE account_id = \(accountID) AND id = \(id)", logger)
        }
    }

    public func resolveDuplicate(accountID: String, id: Int64, status: DuplicateStatus) async throws -> Bool {
        let now = Timestamp.now()
        return try await write { [self] c in
            guard try await lockOpen(c, .duplicates, accountID: accountID, id: id) else { return false }
            return try await c.run(
                "UPDATE potential_duplicates SET status = \(status.rawValue), resolved_at = \(now) WHERE id = \(id) RETURNING 1", logger) == 1
        }
    }

    // MARK: Import, settings

    public func importCards(accountID: String, syncListID: String, cards: [(cardID: String, fields: [String: JSONValue])]) async throws -> Int {
        guard !cards.isEmpty else { return 0 }
        let now = Date()
        return try await write { [self] c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            let keys = Array(Set(cards.map { AccountScoped(accountID, $0.cardID) }))
            var applier = ChangeApplier(rows: try await PostgresChangeRows.load(c, keys: keys, logger: logger))
            try applier.importCards(accountID: accountID, syncListID: syncListID, cards: cards, now: now)
            try await applier.rows.flush(c, logger: logger)
            return applier.written
        }
    }

    public func priorityField(accountID: String, boardID: String) async throws -> PriorityField? {
        try await read { [self] c in try await Self.priorityField(c, accountID: accountID, boardID: boardID, logger: logger) }
    }
}

/// `JobLeaseRows` over the rows of one job and its account, read up front under the account's lock; the writes wait
/// in `writes` until `flush`, in the same transaction.
struct PostgresJobLeaseRows: JobLeaseRows {
    enum Write {
        case insertJob(SyncJob, idempotencyKey: String?)
        case endJob(id: String, status: JobStatus, error: String?, at: String?)
        case touchJob(id: String, at: String, progress: JobProgress?)
        case putLease(JobLeaseRow)
        case removeLease(accountID: String)
        case activity(accountID: String, NewActivity, now: String)
    }

    var jobs: [String: SyncJob] = [:]
    var replay: SyncJob?
    var leases: [String: JobLeaseRow] = [:]
    var writes: [Write] = []

    /// For a submission: the job of the idempotency key, the account's lease and the job holding it.
    static func load(_ c: PostgresConnection, accountID: String, idempotencyKey: String?, logger: Logger) async throws -> Self {
        var rows = Self()
        if let key = idempotencyKey {
            rows.replay = try await c.rows(
                "SELECT \(unescaped: SyncJob.columns) FROM background_jobs WHERE account_id = \(accountID) AND idempotency_key = \(key)",
                logger
            ).first.map(SyncJob.init(stored:))
        }
        try await rows.loadLease(c, accountID: accountID, logger: logger)
        return rows
    }

    /// For a rule on one job: the job, its account's lease and the job holding that.
    static func load(_ c: PostgresConnection, jobID: String, logger: Logger) async throws -> Self {
        var rows = Self()
        guard let job = try await PostgresStore.fetchJob(c, id: jobID, logger: logger) else { return rows }
        rows.jobs[job.id] = job
        try await rows.loadLease(c, accountID: job.accountID, logger: logger)
        return rows
    }

    private mutating func loadLease(_ c: PostgresConnection, accountID: String, logger: Logger) async throws {
        guard
            let row = try await c.rows("SELECT \(unescaped: JobLeaseRow.columns) FROM sync_lease WHERE account_id = \(accountID)", logger).first
        else { return }
        let lease = try JobLeaseRow(stored: row, accountID: accountID)
        leases[accountID] = lease
        if jobs[lease.jobID] == nil, let holding = try await PostgresStore.fetchJob(c, id: lease.jobID, logger: logger) { jobs[holding.id] = holding }
    }

    func job(id: String) -> SyncJob? { jobs[id] }
    func job(accountID: String, idempotencyKey: String) -> SyncJob? { replay }
    func lease(accountID: String) -> JobLeaseRow? { leases[accountID] }

    mutating func insertJob(_ job: SyncJob, idempotencyKey: String?) {
        jobs[job.id] = job
        writes.append(.insertJob(job, idempotencyKey: idempotencyKey))
    }

    /// As its UPDATE: the status set whatever it was (the rule ends only queued or running jobs, and starts queued ones).
    mutating func endJob(id: String, status: JobStatus, error: String?, at now: String?) {
        jobs[id]?.status = status
        jobs[id]?.error = error
        if let now { jobs[id]?.updatedAt = now }
        writes.append(.endJob(id: id, status: status, error: error, at: now))
    }

    mutating func touchJob(id: String, at now: String, progress: JobProgress?) {
        jobs[id]?.updatedAt = now
        writes.append(.touchJob(id: id, at: now, progress: progress))
    }

    mutating func putLease(_ lease: JobLeaseRow) {
        leases[lease.accountID] = lease
        writes.append(.putLease(lease))
    }

    mutating func removeLease(accountID: String) {
        leases[accountID] = nil
        writes.append(.removeLease(accountID: accountID))
    }

    mutating func insertActivity(accountID: String, _ activity: NewActivity, now: String) {
        writes.append(.activity(accountID: accountID, activity, now: now))
    }

    func flush(_ c: PostgresConnection, logger: Logger) async throws {
        for write in writes {
            switch write {
            case .insertJob(let job, let key):
                let results = JSONValue.array(job.results.map(\.json)).canonicalJSON
                _ = try await c.run(
                    """
                    INSERT INTO background_jobs (id, account_id, kind, status, idempotency_key, device_id, processed, total, payload, results, created_at, updated_at)
                    VALUES (\(job.id), \(job.accountID), \(job.kind.rawValue), \(job.status.rawValue), \(key), \(job.deviceID), \(job.processed), \(job.total),
                        \(job.payload.canonicalJSON), \(results), \(job.createdAt), \(job.updatedAt))
                    """, logger)
            case .endJob(let id, let status, let error, let now):
                _ = try await c.run(
                    """
                    UPDATE background_jobs SET status = \(status.rawValue), error = \(error), updated_at = COALESCE(\(now)::text, updated_at)
                    WHERE id = \(id)
                    """, logger)
            case .touchJob(let id, let now, let progress):
                _ = try await c.run(
                    """
                    UPDATE background_jobs SET updated_at = \(now), results = COALESCE(\(progress?.resultsJSON)::text, results),
                        processed = COALESCE(\(progress?.processed)::integer, processed), total = COALESCE(\(progress?.total ?? nil)::integer, total)
                    WHERE id = \(id)
                    """, logger)
            case .putLease(let lease):
                _ = try await c.run(
                    """
                    INSERT INTO sync_lease (account_id, job_id, holder, expires_at, updated_at)
                    VALUES (\(lease.accountID), \(lease.jobID), \(lease.holder), \(lease.expiresAt), \(lease.updatedAt))
                    ON CONFLICT (account_id) DO UPDATE SET job_id = excluded.job_id, holder = excluded.holder, expires_at = excluded.expires_at,
                        updated_at = excluded.updated_at
                    """, logger)
            case .removeLease(let accountID):
                _ = try await c.run("DELETE FROM sync_lease WHERE account_id = \(accountID)", logger)
            case .activity(let accountID, let activity, let now):
                try await PostgresStore.insertActivity(c, [(accountID, activity, now)], logger: logger)
            }
        }
    }
}
