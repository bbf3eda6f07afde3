public import Foundation
import GRDB
public import RoundupCore
public import RoundupStore

/// Sync jobs, the account lease, mappings, conflicts and duplicates, on SQLite.
extension SQLiteStore: SyncJobStore {
    static func fetchJob(_ db: Database, id: String) throws -> SyncJob? {
        try Row.fetchOne(db, sql: "SELECT \(SyncJob.columns) FROM background_jobs WHERE id = ?", arguments: [id]).map(SyncJob.init(stored:))
    }

    public func submitJob(
        accountID: String, kind: JobKind, deviceID: String?, idempotencyKey: String?, payload: JSONValue, total: Int, staleAfter: TimeInterval
    ) async throws -> JobSubmission {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await pool.write { db in
            var rows = SQLiteJobLeaseRows(db: db)
            return try lease.submit(
                accountID: accountID, kind: kind, deviceID: deviceID, idempotencyKey: idempotencyKey, payload: payload, total: total, rows: &rows)
        }
    }

    public func job(accountID: String, id: String) async throws -> SyncJob? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(SyncJob.columns) FROM background_jobs WHERE id = ? AND account_id = ?", arguments: [id, accountID])
                .map(SyncJob.init(stored:))
        }
    }

    public func startJob(id: String, holder: String, staleAfter: TimeInterval) async throws -> JobStart {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await pool.write { db in
            var rows = SQLiteJobLeaseRows(db: db)
            return try lease.start(jobID: id, holder: holder, rows: &rows)
        }
    }

    public func heartbeat(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await pool.write { db in
            var rows = SQLiteJobLeaseRows(db: db)
            return try lease.beat(jobID: jobID, holder: holder, rows: &rows)
        }
    }

    public func recordResult(
        jobID: String, holder: String, index: Int, result: SyncItemResult, total: Int?, staleAfter: TimeInterval
    ) async throws -> Bool {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await pool.write { db in
            var rows = SQLiteJobLeaseRows(db: db)
            return try lease.record(jobID: jobID, holder: holder, index: index, result: result, total: total, rows: &rows)
        }
    }

    public func yieldJob(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool {
        let lease = JobLease(staleAfter: staleAfter, now: Date())
        return try await pool.write { db in
            var rows = SQLiteJobLeaseRows(db: db)
            return try lease.yield(jobID: jobID, holder: holder, rows: &rows)
        }
    }

    public func finishJob(jobID: String, status: JobStatus, error: String?) async throws {
        let lease = JobLease(staleAfter: 0, now: Date())
        try await pool.write { db in
            var rows = SQLiteJobLeaseRows(db: db)
            try lease.finish(jobID: jobID, status: status, error: error, rows: &rows)
        }
    }

    // MARK: Mappings

    public func task(accountID: String, cardID: String) async throws -> SyncTaskRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT \(SyncTaskRecord.columns) FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?",
                arguments: [accountID, cardID]
            ).map(SyncTaskRecord.init(stored:))
        }
    }

    public func tasks(accountID: String, reminderID: String) async throws -> [SyncTaskRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT \(SyncTaskRecord.columns) FROM sync_tasks WHERE account_id = ? AND reminder_id = ? ORDER BY updated_at DESC, id DESC",
                arguments: [accountID, reminderID]
            ).map(SyncTaskRecord.init(stored:))
        }
    }

    public func mappedCardIDs(accountID: String, syncListID: String) async throws -> Set<String> {
        try await pool.read { db in
            Set(
                try String.fetchAll(
                    db,
                    sql:
                        "SELECT trello_card_id FROM sync_tasks WHERE account_id = ? AND sync_list_id = ? AND reminder_id IS NOT NULL AND deleted = 0",
                    arguments: [accountID, syncListID]))
        }
    }

    public func unackedChange(accountID: String, cardID: String) async throws -> PendingChange? {
        try await pool.read { db in
            try Self.changes(
                db, PendingChangeList(accountID: accountID),
                sql: """
                    SELECT \(PendingChange.columns) FROM pending_changes p
                    WHERE p.account_id = ? AND p.trello_card_id = ? AND p.superseded = 0 ORDER BY p.id DESC LIMIT 1
                    """,
                arguments: [accountID, cardID]
            ).changes.first
        }
    }

    public func reserveCreate(accountID: String, syncListID: String, reminderID: String) async throws {
        let now = Timestamp.now()
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, deleted, created_at, updated_at)
                    VALUES (?, ?, ?, ?, '{}', 1, ?, ?)
                    ON CONFLICT (account_id, trello_card_id) DO UPDATE SET updated_at = excluded.updated_at
                    """,
                arguments: [accountID, syncListID, SyncTaskRecord.placeholderPrefix + reminderID, reminderID, now, now])
        }
    }

    public func releaseCreate(accountID: String, reminderID: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?",
                arguments: [accountID, SyncTaskRecord.placeholderPrefix + reminderID])
        }
    }

    public func recordSyncWrite(_ w: SyncWrite) async throws -> [Int64] {
        let now = Date()
        return try await pool.write { db in
            var applier = ChangeApplier(rows: SQLiteChangeRows(db: db))
            return try applier.record(w, now: now).compactMap { $0 }
        }
    }

    // MARK: Duplicates and conflicts

    public func addDuplicate(accountID: String, _ d: NewDuplicate) async throws -> Int64 {
        let now = Timestamp.now()
        let fields = JSONValue.object(d.fields).canonicalJSON
        return try await pool.write { db in
            let stored = try Row.fetchAll(
                db, sql: "SELECT id, status FROM potential_duplicates WHERE account_id = ? AND reminder_id = ? ORDER BY id",
                arguments: [accountID, d.reminderID]
            ).map { (id: try $0.int64(0), status: try $0.value(1, as: DuplicateStatus.self)) }
            if let id = PotentialDuplicates.rewritten(among: stored) {
                try db.execute(
                    sql: "UPDATE potential_duplicates SET trello_card_id = ?, title = ?, due_date = ?, fields = ?, job_id = ? WHERE id = ?",
                    arguments: [d.cardID, d.title, d.dueDate, fields, d.jobID, id])
                return id
            }
            try db.execute(
                sql: """
                    INSERT INTO potential_duplicates (account_id, sync_list_id, reminder_id, trello_card_id, title, due_date, job_id, status, created_at, fields)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [accountID, d.syncListID, d.reminderID, d.cardID, d.title, d.dueDate, d.jobID, DuplicateStatus.open, now, fields])
            return db.lastInsertedRowID
        }
    }

    public func conflict(accountID: String, id: Int64) async throws -> ConflictDetail? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(ConflictDetail.columns) FROM conflicts WHERE account_id = ? AND id = ?", arguments: [accountID, id])
                .map(ConflictDetail.init(stored:))
        }
    }

    public func resolveConflict(accountID: String, id: Int64, resolution: ConflictChoice) async throws -> Bool {
        try await resolve(
            .conflicts, accountID: accountID, id: id, set: "status = ?, resolution = ?, resolved_at = ?",
            [ConflictStatus.resolved, resolution, Timestamp.now()])
    }

    /// Resolves a conflict or duplicate in one write transaction, as the rule allows: only an open one
    /// (`ResolutionTable.isOpen`); whether it did.
    private func resolve(_ table: ResolutionTable, accountID: String, id: Int64, set: String, _ values: StatementArguments) async throws -> Bool {
        try await pool.write { db in
            guard
                let status = try String.fetchOne(
                    db, sql: "SELECT status FROM \(table.rawValue) WHERE account_id = ? AND id = ?", arguments: [accountID, id]),
                try table.isOpen(status)
            else { return false }
            try db.execute(sql: "UPDATE \(table.rawValue) SET \(set) WHERE id = ?", arguments: values + [id])
            return true
        }
    }

    public func duplicate(accountID: String, id: Int64) async throws -> DuplicateDetail? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT \(DuplicateDetail.columns) FROM potential_duplicates WHERE account_id = ? AND id = ?", arguments: [accountID, id]
            )
            .map(DuplicateDetail.init(stored:))
        }
    }

    /// Claims an open conflict or duplicate for one resolution at a time (a claim older than a minute has died);
    /// false when it is resolved or another resolution holds it.
    public func claimResolution(accountID: String, table: ResolutionTable, id: Int64) async throws -> Bool {
        let rule = ResolutionClaim()
        return try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT status, resolving_at FROM \(table.rawValue) WHERE account_id = ? AND id = ?", arguments: [accountID, id]),
                let stamp = rule.claim(open: try table.isOpen(row.text(0)), heldSince: try row.optionalText(1))
            else { return false }
            try db.execute(sql: "UPDATE \(table.rawValue) SET resolving_at = ? WHERE id = ?", arguments: [stamp, id])
            return true
        }
    }

    public func releaseResolution(accountID: String, table: ResolutionTable, id: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE \(table.rawValue) SET resolving_at = NULL WHERE account_id = ? AND id = ?", arguments: [accountID, id])
        }
    }

    public func resolveDuplicate(accountID: String, id: Int64, status: DuplicateStatus) async throws -> Bool {
        try await resolve(.duplicates, accountID: accountID, id: id, set: "status = ?, resolved_at = ?", [status, Timestamp.now()])
    }

    // MARK: Import, settings

    public func importCards(accountID: String, syncListID: String, cards: [(cardID: String, fields: [String: JSONValue])]) async throws -> Int {
        guard !cards.isEmpty else { return 0 }
        let now = Date()
        return try await pool.write { db in
            var applier = ChangeApplier(rows: SQLiteChangeRows(db: db))
            try applier.importCards(accountID: accountID, syncListID: syncListID, cards: cards, now: now)
            return applier.written
        }
    }

    public func priorityField(accountID: String, boardID: String) async throws -> PriorityField? {
        try await pool.read { db in try Self.priorityField(db, accountID: accountID, boardID: boardID) }
    }
}

/// `JobLeaseRows` as statements in SQLite's write transaction.
struct SQLiteJobLeaseRows: JobLeaseRows {
    let db: Database

    func job(id: String) throws -> SyncJob? { try SQLiteStore.fetchJob(db, id: id) }

    func job(accountID: String, idempotencyKey: String) throws -> SyncJob? {
        try Row.fetchOne(
            db, sql: "SELECT \(SyncJob.columns) FROM background_jobs WHERE account_id = ? AND idempotency_key = ?",
            arguments: [accountID, idempotencyKey]
        ).map(SyncJob.init(stored:))
    }

    func lease(accountID: String) throws -> JobLeaseRow? {
        try Row.fetchOne(db, sql: "SELECT \(JobLeaseRow.columns) FROM sync_lease WHERE account_id = ?", arguments: [accountID]).map {
            try JobLeaseRow(stored: $0, accountID: accountID)
        }
    }

    func insertJob(_ job: SyncJob, idempotencyKey: String?) throws {
        try db.execute(
            sql: """
                INSERT INTO background_jobs (id, account_id, kind, status, idempotency_key, device_id, processed, total, payload, results, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                job.id, job.accountID, job.kind, job.status, idempotencyKey, job.deviceID, job.processed, job.total, job.payload.canonicalJSON,
                JSONValue.array(job.results.map(\.json)).canonicalJSON, job.createdAt, job.updatedAt,
            ])
    }

    func endJob(id: String, status: JobStatus, error: String?, at now: String?) throws {
        try db.execute(
            sql: "UPDATE background_jobs SET status = ?, error = ?, updated_at = COALESCE(?, updated_at) WHERE id = ?",
            arguments: [status, error, now, id])
    }

    func touchJob(id: String, at now: String, progress: JobProgress?) throws {
        try db.execute(
            sql: """
                UPDATE background_jobs SET updated_at = ?, results = COALESCE(?, results), processed = COALESCE(?, processed), total = COALESCE(?, total)
                WHERE id = ?
                """,
            arguments: [now, progress?.resultsJSON, progress?.processed, progress?.total, id])
    }

    func putLease(_ lease: JobLeaseRow) throws {
        try db.execute(
            sql: """
                INSERT INTO sync_lease (account_id, job_id, holder, expires_at, updated_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (account_id) DO UPDATE SET job_id = excluded.job_id, holder = excluded.holder, expires_at = excluded.expires_at,
                    updated_at = excluded.updated_at
                """,
            arguments: [lease.accountID, lease.jobID, lease.holder, lease.expiresAt, lease.updatedAt])
    }

    func removeLease(accountID: String) throws {
        try db.execute(sql: "DELETE FROM sync_lease WHERE account_id = ?", arguments: [accountID])
    }

    func insertActivity(accountID: String, _ activity: NewActivity, now: String) throws {
        try SQLiteStore.insertActivity(db, accountID: accountID, activity, now: now)
    }
}
