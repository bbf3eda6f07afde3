import Foundation
import GRDB
import RoundupCore

/// Sync jobs, the account lease, mappings, conflicts and duplicates, on SQLite.
extension SQLiteStore: SyncJobStore {
    private static let jobColumns = "id, account_id, kind, status, device_id, processed, total, payload, results, error, created_at, updated_at"

    private static func job(_ row: Row) -> SyncJob {
        let results = (try? JSONParser.parse(Array((row[8] as String).utf8)))?.arrayValue ?? []
        return SyncJob(
            id: row[0], accountID: row[1], kind: row[2], status: row[3], deviceID: row[4], processed: row[5], total: row[6],
            payload: (try? JSONParser.parse(Array((row[7] as String).utf8))) ?? .null,
            results: results.compactMap(SyncItemResult.init(json:)), error: row[9], createdAt: row[10], updatedAt: row[11])
    }

    private static func fetchJob(_ db: Database, id: String) throws -> SyncJob? {
        try Row.fetchOne(db, sql: "SELECT \(jobColumns) FROM background_jobs WHERE id = ?", arguments: [id]).map(job)
    }

    public func submitJob(
        accountID: String, kind: String, deviceID: String?, idempotencyKey: String?, payload: JSONValue, total: Int, staleAfter: TimeInterval
    ) async throws -> JobSubmission {
        let now = Date()
        let nowText = Timestamp.string(now)
        let payloadText = payload.canonicalJSON
        return try await pool.write { db in
            if let key = idempotencyKey,
               let existing = try Row.fetchOne(db, sql: "SELECT \(Self.jobColumns) FROM background_jobs WHERE account_id = ? AND idempotency_key = ?", arguments: [accountID, key])
            {
                return .replayed(Self.job(existing))
            }
            let takesLease = kind != "reconcile"
            if takesLease, let holder = try String.fetchOne(db, sql: "SELECT job_id FROM sync_lease WHERE account_id = ?", arguments: [accountID]) {
                if let running = try Self.fetchJob(db, id: holder), running.status == "running" {
                    if !running.isStale(now: now, staleAfter: staleAfter) { return .busy(runningJobID: holder) }
                    try db.execute(sql: "UPDATE background_jobs SET status = 'error', error = 'stale' WHERE id = ? AND status = 'running'", arguments: [holder])
                }
                try db.execute(sql: "DELETE FROM sync_lease WHERE account_id = ?", arguments: [accountID])
            }
            let id = UUID().uuidString.lowercased()
            try db.execute(
                sql: """
                    INSERT INTO background_jobs (id, account_id, kind, status, idempotency_key, device_id, processed, total, payload, results, created_at, updated_at)
                    VALUES (?, ?, ?, 'running', ?, ?, 0, ?, ?, '[]', ?, ?)
                    """,
                arguments: [id, accountID, kind, idempotencyKey, deviceID, total, payloadText, nowText, nowText])
            if takesLease {
                try db.execute(
                    sql: "INSERT INTO sync_lease (account_id, job_id, holder, expires_at, updated_at) VALUES (?, ?, 'api', ?, ?)",
                    arguments: [accountID, id, Timestamp.string(now.addingTimeInterval(staleAfter)), nowText])
            }
            return .created(try Self.fetchJob(db, id: id)!)
        }
    }

    public func job(accountID: String, id: String) async throws -> SyncJob? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.jobColumns) FROM background_jobs WHERE id = ? AND account_id = ?", arguments: [id, accountID]).map(Self.job)
        }
    }

    public func startJob(id: String, holder: String, staleAfter: TimeInterval) async throws -> JobStart {
        let now = Date()
        let nowText = Timestamp.string(now)
        return try await pool.write { db in
            guard let job = try Self.fetchJob(db, id: id) else { return .skip(reason: "no such job") }
            guard job.status == "running" else { return .skip(reason: "already \(job.status)") }
            if job.isStale(now: now, staleAfter: staleAfter) {
                // The app has been told: it stopped polling and may have resubmitted. Never resume it.
                try Self.markStale(db, job: job)
                return .skip(reason: "stale")
            }
            if job.kind == "reconcile" {
                try db.execute(sql: "UPDATE background_jobs SET updated_at = ? WHERE id = ?", arguments: [nowText, id])
                var started = job
                started.updatedAt = nowText
                return .run(started)
            }
            let leaseHolder = try String.fetchOne(db, sql: "SELECT job_id FROM sync_lease WHERE account_id = ?", arguments: [job.accountID])
            if let leaseHolder, leaseHolder != id {
                try db.execute(sql: "UPDATE background_jobs SET status = 'error', error = 'lease lost', updated_at = ? WHERE id = ?", arguments: [nowText, id])
                return .skip(reason: "another job holds the account's lease")
            }
            // Its stream entry looked idle, but the worker running it still beats: leave it to that worker.
            if let lease = try Row.fetchOne(db, sql: "SELECT holder, updated_at FROM sync_lease WHERE job_id = ?", arguments: [id]),
               (lease[0] as String) != holder, (lease[0] as String) != "api",
               let beat = Timestamp.date(lease[1]), now.timeIntervalSince(beat) < staleAfter / 4
            {
                return .skip(reason: "running on \(lease[0] as String)")
            }
            try db.execute(
                sql: """
                    INSERT INTO sync_lease (account_id, job_id, holder, expires_at, updated_at) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (account_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at, updated_at = excluded.updated_at
                    """,
                arguments: [job.accountID, id, holder, Timestamp.string(now.addingTimeInterval(staleAfter)), nowText])
            try db.execute(sql: "UPDATE background_jobs SET updated_at = ? WHERE id = ?", arguments: [nowText, id])
            var started = job
            started.updatedAt = nowText
            return .run(started)
        }
    }

    private static func markStale(_ db: Database, job: SyncJob) throws {
        try db.execute(sql: "UPDATE background_jobs SET status = 'error', error = 'stale' WHERE id = ? AND status = 'running'", arguments: [job.id])
        try db.execute(sql: "DELETE FROM sync_lease WHERE account_id = ? AND job_id = ?", arguments: [job.accountID, job.id])
    }

    /// Moves the heartbeat, unless the job is no longer running, already reads as stale, or is no longer this holder's
    /// (another worker took it over: the lease names that worker now).
    private static func beat(
        _ db: Database, jobID: String, holder: String, staleAfter: TimeInterval, now: Date, extra: String = "", arguments extraArguments: StatementArguments = []
    ) throws -> Bool {
        let nowText = Timestamp.string(now)
        let cutoff = Timestamp.string(now.addingTimeInterval(-staleAfter))
        try db.execute(
            sql: """
                UPDATE background_jobs SET updated_at = ?\(extra) WHERE id = ? AND status = 'running' AND updated_at >= ?
                AND (kind = 'reconcile' OR EXISTS (SELECT 1 FROM sync_lease WHERE job_id = background_jobs.id AND holder = ?))
                """,
            arguments: [nowText] + extraArguments + [jobID, cutoff, holder])
        guard db.changesCount == 1 else {
            if let job = try fetchJob(db, id: jobID), job.isStale(now: now, staleAfter: staleAfter) { try markStale(db, job: job) }
            return false
        }
        try db.execute(
            sql: "UPDATE sync_lease SET expires_at = ?, updated_at = ? WHERE job_id = ? AND holder = ?",
            arguments: [Timestamp.string(now.addingTimeInterval(staleAfter)), nowText, jobID, holder])
        return true
    }

    public func heartbeat(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool {
        try await pool.write { db in try Self.beat(db, jobID: jobID, holder: holder, staleAfter: staleAfter, now: Date()) }
    }

    public func recordResult(jobID: String, holder: String, index: Int, result: SyncItemResult, total: Int?, staleAfter: TimeInterval) async throws -> Bool {
        try await pool.write { db in
            guard let text = try String.fetchOne(db, sql: "SELECT results FROM background_jobs WHERE id = ?", arguments: [jobID]) else { return false }
            var results = (try? JSONParser.parse(Array(text.utf8)))?.arrayValue ?? []
            if index < results.count { results[index] = result.json } else { results.append(result.json) }
            var extra = ", results = ?, processed = ?"
            var arguments: StatementArguments = [JSONValue.array(results).canonicalJSON, results.count]
            if let total {
                extra += ", total = ?"
                arguments += [total]
            }
            return try Self.beat(db, jobID: jobID, holder: holder, staleAfter: staleAfter, now: Date(), extra: extra, arguments: arguments)
        }
    }

    public func finishJob(jobID: String, status: String, error: String?) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE background_jobs SET status = ?, error = ?, updated_at = ? WHERE id = ? AND status = 'running'",
                arguments: [status, error, Timestamp.now(), jobID])
            try db.execute(sql: "DELETE FROM sync_lease WHERE job_id = ?", arguments: [jobID])
        }
    }

    // MARK: Mappings

    private static let taskColumns = "sync_list_id, trello_card_id, reminder_id, deleted, field_hashes, last_synced_at"

    private static func task(_ row: Row) -> SyncTaskRecord {
        SyncTaskRecord(
            syncListID: row[0], cardID: row[1], reminderID: row[2], deleted: row[3],
            stamps: FieldStamps.decodeStamps(row[4]).mapValues { FieldStamp(hash: $0.hash, time: $0.time) }, lastSyncedAt: row[5])
    }

    public func task(accountID: String, cardID: String) async throws -> SyncTaskRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.taskColumns) FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?", arguments: [accountID, cardID]).map(Self.task)
        }
    }

    public func task(accountID: String, reminderID: String) async throws -> SyncTaskRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT \(Self.taskColumns) FROM sync_tasks WHERE account_id = ? AND reminder_id = ?
                    ORDER BY CASE WHEN trello_card_id LIKE 'pending:%' THEN 1 WHEN deleted = 0 THEN 0 ELSE 2 END, updated_at DESC LIMIT 1
                    """,
                arguments: [accountID, reminderID]
            ).map(Self.task)
        }
    }

    public func mappedCardIDs(accountID: String, syncListID: String) async throws -> Set<String> {
        try await pool.read { db in
            Set(try String.fetchAll(
                db, sql: "SELECT trello_card_id FROM sync_tasks WHERE account_id = ? AND sync_list_id = ? AND reminder_id IS NOT NULL AND deleted = 0",
                arguments: [accountID, syncListID]))
        }
    }

    public func unackedChange(accountID: String, cardID: String) async throws -> PendingChange? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT id, sync_list_id, change_type, changed_fields, fields, trello_action_id, created_at FROM pending_changes
                    WHERE account_id = ? AND trello_card_id = ? AND superseded = 0 ORDER BY id DESC LIMIT 1
                    """,
                arguments: [accountID, cardID]
            ).map { row in
                PendingChange(
                    id: row[0], accountID: accountID, syncListID: row[1], changeType: row[2],
                    changedFields: PendingChangeCoding.changedFields(row[3]), fields: PendingChangeCoding.fields(row[4]),
                    trelloCardID: cardID, trelloActionID: row[5], reminderID: nil,
                    createdAt: Timestamp.date(row[6]) ?? Date(timeIntervalSince1970: 0))
            }
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
        let nowText = Timestamp.string(now)
        return try await pool.write { db in
            var applier = ChangeApplier(rows: SQLiteChangeRows(db: db))
            let existing = try Row.fetchOne(
                db, sql: "SELECT field_hashes, deleted FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?", arguments: [w.accountID, w.cardID])
            var stamps = existing.map { FieldStamps.decodeStamps($0[0]) } ?? [:]
            for (field, stamp) in w.stamps { stamps[field] = FieldStamps.Stamp(hash: stamp.hash, time: stamp.time) }
            let wasDeleted = existing.map { $0[1] as Bool } ?? true
            if w.deleted {
                stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "removed", time: now.timeIntervalSince1970)
            } else if wasDeleted {
                stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "present", time: now.timeIntervalSince1970)
            }
            try db.execute(
                sql: """
                    INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, deleted, last_synced_at, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                        reminder_id = COALESCE(excluded.reminder_id, reminder_id), field_hashes = excluded.field_hashes,
                        deleted = excluded.deleted, last_synced_at = excluded.last_synced_at, updated_at = excluded.updated_at
                    """,
                arguments: [w.accountID, w.syncListID, w.cardID, w.reminderID, FieldStamps.encode(stamps), w.deleted, nowText, nowText, nowText])
            if let reminder = w.reminderID {
                try db.execute(
                    sql: "DELETE FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?",
                    arguments: [w.accountID, SyncTaskRecord.placeholderPrefix + reminder])
            }
            let observation = CardObservation(
                accountID: w.accountID, syncListID: w.syncListID, cardID: w.cardID, actionID: nil, actionDate: now, kind: .removed)
            if w.dropPending {
                try db.execute(sql: "DELETE FROM pending_changes WHERE account_id = ? AND trello_card_id = ?", arguments: [w.accountID, w.cardID])
            } else {
                if !w.winning.isEmpty, let previous = try Row.fetchOne(
                    db, sql: "SELECT change_type, fields FROM pending_changes WHERE account_id = ? AND trello_card_id = ? AND superseded = 0 ORDER BY id DESC LIMIT 1",
                    arguments: [w.accountID, w.cardID]), (previous[0] as String) != "delete"
                {
                    let fields = PendingChangeCoding.fields(previous[1])
                    let overlap = w.winning.filter { name, value in fields[name].map { $0 != value } ?? false }
                    if !overlap.isEmpty {
                        try applier.writeChange(observation, type: "update", changed: overlap.keys.sorted(), fields: overlap)
                    }
                }
                if !w.toApps.isEmpty {
                    let type = w.toApps == [SyncField.completed: .bool(true)] ? "complete" : "update"
                    try applier.writeChange(observation, type: type, changed: w.toApps.keys.sorted(), fields: w.toApps)
                }
            }
            var ids: [Int64] = []
            for conflict in w.conflicts {
                let trelloValue = conflict.trelloValue.canonicalJSON
                let remindersValue = conflict.remindersValue.canonicalJSON
                if let id = try Int64.fetchOne(
                    db, sql: "SELECT id FROM conflicts WHERE account_id = ? AND trello_card_id = ? AND field = ? AND status = 'open'",
                    arguments: [w.accountID, w.cardID, conflict.field])
                {
                    try db.execute(
                        sql: "UPDATE conflicts SET trello_value = ?, reminders_value = ?, reminder_id = COALESCE(?, reminder_id), job_id = ? WHERE id = ?",
                        arguments: [trelloValue, remindersValue, w.reminderID, w.jobID, id])
                    ids.append(id)
                } else {
                    try db.execute(
                        sql: """
                            INSERT INTO conflicts (account_id, sync_list_id, sync_task_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at, job_id)
                            VALUES (?, ?, (SELECT id FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?), ?, ?, ?, ?, ?, 'open', ?, ?)
                            """,
                        arguments: [w.accountID, w.syncListID, w.accountID, w.cardID, w.cardID, w.reminderID, conflict.field, trelloValue, remindersValue, nowText, w.jobID])
                    ids.append(db.lastInsertedRowID)
                }
            }
            return ids
        }
    }

    // MARK: Duplicates and conflicts

    public func addDuplicate(accountID: String, _ d: NewDuplicate) async throws -> Int64 {
        let now = Timestamp.now()
        let fields = JSONValue.object(d.fields).canonicalJSON
        return try await pool.write { db in
            if let id = try Int64.fetchOne(
                db, sql: "SELECT id FROM potential_duplicates WHERE account_id = ? AND reminder_id = ? AND status = 'open'", arguments: [accountID, d.reminderID])
            {
                try db.execute(
                    sql: "UPDATE potential_duplicates SET trello_card_id = ?, title = ?, due_date = ?, fields = ?, job_id = ? WHERE id = ?",
                    arguments: [d.cardID, d.title, d.dueDate, fields, d.jobID, id])
                return id
            }
            try db.execute(
                sql: """
                    INSERT INTO potential_duplicates (account_id, sync_list_id, reminder_id, trello_card_id, title, due_date, job_id, status, created_at, fields)
                    VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?, ?)
                    """,
                arguments: [accountID, d.syncListID, d.reminderID, d.cardID, d.title, d.dueDate, d.jobID, now, fields])
            return db.lastInsertedRowID
        }
    }

    public func conflict(accountID: String, id: Int64) async throws -> ConflictDetail? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT id, sync_list_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at, resolution, resolved_at
                    FROM conflicts WHERE account_id = ? AND id = ?
                    """,
                arguments: [accountID, id]
            ).map { row in
                ConflictDetail(
                    record: ConflictRecord(
                        id: row[0], syncListID: row[1], trelloCardID: row[2], reminderID: row[3], field: row[4], trelloValue: row[5],
                        remindersValue: row[6], status: row[7], createdAt: row[8]),
                    resolution: row[9], resolvedAt: row[10])
            }
        }
    }

    public func resolveConflict(accountID: String, id: Int64, resolution: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE conflicts SET status = 'resolved', resolution = ?, resolved_at = ? WHERE account_id = ? AND id = ? AND status = 'open'",
                arguments: [resolution, Timestamp.now(), accountID, id])
            return db.changesCount == 1
        }
    }

    public func duplicate(accountID: String, id: Int64) async throws -> DuplicateDetail? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT id, sync_list_id, reminder_id, trello_card_id, title, due_date, status, created_at, fields, resolved_at
                    FROM potential_duplicates WHERE account_id = ? AND id = ?
                    """,
                arguments: [accountID, id]
            ).map { row in
                DuplicateDetail(
                    record: DuplicateRecord(
                        id: row[0], syncListID: row[1], reminderID: row[2], trelloCardID: row[3], title: row[4], dueDate: row[5],
                        status: row[6], createdAt: row[7]),
                    fields: PendingChangeCoding.fields(row[8]), resolvedAt: row[9])
            }
        }
    }

    /// Claims an open conflict or duplicate for one resolution at a time (a claim older than a minute has died);
    /// false when it is resolved or another resolution holds it.
    public func claimResolution(accountID: String, table: ResolutionTable, id: Int64) async throws -> Bool {
        let now = Date()
        return try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE \(table.rawValue) SET resolving_at = ? WHERE account_id = ? AND id = ? AND status = 'open'
                    AND (resolving_at IS NULL OR resolving_at < ?)
                    """,
                arguments: [Timestamp.string(now), accountID, id, Timestamp.string(now.addingTimeInterval(-60))])
            return db.changesCount == 1
        }
    }

    public func releaseResolution(accountID: String, table: ResolutionTable, id: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE \(table.rawValue) SET resolving_at = NULL WHERE account_id = ? AND id = ?", arguments: [accountID, id])
        }
    }

    public func resolveDuplicate(accountID: String, id: Int64, status: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE potential_duplicates SET status = ?, resolved_at = ? WHERE account_id = ? AND id = ? AND status = 'open'",
                arguments: [status, Timestamp.now(), accountID, id])
            return db.changesCount == 1
        }
    }

    // MARK: Import, settings

    public func importCards(accountID: String, syncListID: String, cards: [(cardID: String, fields: [String: JSONValue])]) async throws -> Int {
        guard !cards.isEmpty else { return 0 }
        let now = Date()
        let nowText = Timestamp.string(now)
        return try await pool.write { db in
            var applier = ChangeApplier(rows: SQLiteChangeRows(db: db))
            for card in cards {
                if let mapped = try Row.fetchOne(
                    db, sql: "SELECT reminder_id, deleted FROM sync_tasks WHERE account_id = ? AND trello_card_id = ?", arguments: [accountID, card.cardID]),
                   (mapped[0] as String?) != nil, !(mapped[1] as Bool)
                {
                    continue  // already on the devices
                }
                var stamps = card.fields.mapValues { FieldStamps.Stamp(hash: $0.fieldHash, time: now.timeIntervalSince1970) }
                stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "present", time: now.timeIntervalSince1970)
                try db.execute(
                    sql: """
                        INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, field_hashes, deleted, created_at, updated_at)
                        VALUES (?, ?, ?, ?, 0, ?, ?)
                        ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                            field_hashes = excluded.field_hashes, deleted = 0, updated_at = excluded.updated_at
                        """,
                    arguments: [accountID, syncListID, card.cardID, FieldStamps.encode(stamps), nowText, nowText])
                let observation = CardObservation(accountID: accountID, syncListID: syncListID, cardID: card.cardID, actionID: nil, actionDate: now, kind: .removed)
                try applier.writeChange(observation, type: "create", changed: card.fields.keys.sorted(), fields: card.fields)
            }
            return applier.written
        }
    }

    public func priorityField(accountID: String, boardID: String) async throws -> PriorityField? {
        try await pool.read { db in try Self.priorityField(db, accountID: accountID, boardID: boardID) }
    }

    public func conflictPolicy(accountID: String) async throws -> (policy: String, deleteMode: String) {
        try await pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT conflict_policy, delete_mode FROM accounts WHERE id = ?", arguments: [accountID]) else {
                return ("manual", "archive")
            }
            return (row[0], row[1])
        }
    }
}
