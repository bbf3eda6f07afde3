import Foundation
import Logging
import PostgresNIO
import RoundupCore

/// Sync jobs, the account lease, mappings, conflicts and duplicates, on PostgreSQL (as `SQLiteStore+Sync`).
/// Every write to a job or the lease first takes its account's advisory lock (`lockAccounts`).
extension PostgresStore: SyncJobStore {
    private static let jobColumns = "id, account_id, kind, status, device_id, processed, total, payload, results, error, created_at, updated_at"

    private static func job(_ row: PostgresRow) throws -> SyncJob {
        let payloadText = try row.text(7)
        let resultsText = try row.text(8)
        let results = (try? JSONParser.parse(Array(resultsText.utf8)))?.arrayValue ?? []
        return try SyncJob(
            id: row.text(0), accountID: row.text(1), kind: row.text(2), status: row.text(3), deviceID: row.optionalText(4),
            processed: row.int(5), total: row.int(6), payload: (try? JSONParser.parse(Array(payloadText.utf8))) ?? .null,
            results: results.compactMap(SyncItemResult.init(json:)), error: row.optionalText(9), createdAt: row.text(10), updatedAt: row.text(11))
    }

    private static func fetchJob(_ c: PostgresConnection, id: String, logger: Logger) async throws -> SyncJob? {
        try await c.rows("SELECT \(unescaped: Self.jobColumns) FROM background_jobs WHERE id = \(id)", logger).first.map(Self.job)
    }

    public func submitJob(
        accountID: String, kind: String, deviceID: String?, idempotencyKey: String?, payload: JSONValue, total: Int, staleAfter: TimeInterval
    ) async throws -> JobSubmission {
        let now = Date()
        let nowText = Timestamp.string(now)
        let expires = Timestamp.string(now.addingTimeInterval(staleAfter))
        let payloadText = payload.canonicalJSON
        return try await write { c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            if let key = idempotencyKey,
               let existing = try await c.rows(
                   "SELECT \(unescaped: Self.jobColumns) FROM background_jobs WHERE account_id = \(accountID) AND idempotency_key = \(key)", logger
               ).first
            {
                return .replayed(try Self.job(existing))
            }
            let takesLease = kind != "reconcile"
            if takesLease, let holder = try await c.rows("SELECT job_id FROM sync_lease WHERE account_id = \(accountID)", logger).first?.text(0) {
                if let running = try await Self.fetchJob(c, id: holder, logger: logger), running.status == "running" {
                    if !running.isStale(now: now, staleAfter: staleAfter) { return .busy(runningJobID: holder) }
                    _ = try await c.run("UPDATE background_jobs SET status = 'error', error = 'stale' WHERE id = \(holder) AND status = 'running'", logger)
                }
                _ = try await c.run("DELETE FROM sync_lease WHERE account_id = \(accountID)", logger)
            }
            let id = UUID().uuidString.lowercased()
            _ = try await c.run(
                """
                INSERT INTO background_jobs (id, account_id, kind, status, idempotency_key, device_id, processed, total, payload, results, created_at, updated_at)
                VALUES (\(id), \(accountID), \(kind), 'running', \(idempotencyKey), \(deviceID), 0, \(total), \(payloadText), '[]', \(nowText), \(nowText))
                """,
                logger)
            if takesLease {
                _ = try await c.run(
                    "INSERT INTO sync_lease (account_id, job_id, holder, expires_at, updated_at) VALUES (\(accountID), \(id), 'api', \(expires), \(nowText))",
                    logger)
            }
            return .created(try await Self.fetchJob(c, id: id, logger: logger)!)
        }
    }

    public func job(accountID: String, id: String) async throws -> SyncJob? {
        try await read { c in
            try await c.rows(
                "SELECT \(unescaped: Self.jobColumns) FROM background_jobs WHERE id = \(id) AND account_id = \(accountID)", logger
            ).first.map(Self.job)
        }
    }

    public func startJob(id: String, holder: String, staleAfter: TimeInterval) async throws -> JobStart {
        let now = Date()
        let nowText = Timestamp.string(now)
        let expires = Timestamp.string(now.addingTimeInterval(staleAfter))
        return try await write { c in
            try await Self.lockJobAccount(c, jobID: id, logger: logger)
            guard let job = try await Self.fetchJob(c, id: id, logger: logger) else { return .skip(reason: "no such job") }
            guard job.status == "running" else { return .skip(reason: "already \(job.status)") }
            if job.isStale(now: now, staleAfter: staleAfter) {
                // Never resume a stale job (as in SQLiteStore).
                try await Self.markStale(c, job: job, logger: logger)
                return .skip(reason: "stale")
            }
            if job.kind == "reconcile" {
                _ = try await c.run("UPDATE background_jobs SET updated_at = \(nowText) WHERE id = \(id)", logger)
                var started = job
                started.updatedAt = nowText
                return .run(started)
            }
            let leaseHolder = try await c.rows("SELECT job_id FROM sync_lease WHERE account_id = \(job.accountID)", logger).first?.text(0)
            if let leaseHolder, leaseHolder != id {
                _ = try await c.run(
                    "UPDATE background_jobs SET status = 'error', error = 'lease lost', updated_at = \(nowText) WHERE id = \(id)", logger)
                return .skip(reason: "another job holds the account's lease")
            }
            // Its stream entry looked idle, but the worker running it still beats: leave it to that worker.
            if let lease = try await c.rows("SELECT holder, updated_at FROM sync_lease WHERE job_id = \(id)", logger).first {
                let leaseHolderName = try lease.text(0)
                let leaseBeat = try lease.text(1)
                if leaseHolderName != holder, leaseHolderName != "api",
                   let beat = Timestamp.date(leaseBeat), now.timeIntervalSince(beat) < staleAfter / 4
                {
                    return .skip(reason: "running on \(leaseHolderName)")
                }
            }
            _ = try await c.run(
                """
                INSERT INTO sync_lease (account_id, job_id, holder, expires_at, updated_at) VALUES (\(job.accountID), \(id), \(holder), \(expires), \(nowText))
                ON CONFLICT (account_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at, updated_at = excluded.updated_at
                """,
                logger)
            _ = try await c.run("UPDATE background_jobs SET updated_at = \(nowText) WHERE id = \(id)", logger)
            var started = job
            started.updatedAt = nowText
            return .run(started)
        }
    }

    private static func markStale(_ c: PostgresConnection, job: SyncJob, logger: Logger) async throws {
        _ = try await c.run("UPDATE background_jobs SET status = 'error', error = 'stale' WHERE id = \(job.id) AND status = 'running'", logger)
        _ = try await c.run("DELETE FROM sync_lease WHERE account_id = \(job.accountID) AND job_id = \(job.id)", logger)
    }

    /// Moves the heartbeat (as `SQLiteStore.beat`); `results`, `processed` and `total`, when given, are set with it.
    private static func beat(
        _ c: PostgresConnection, jobID: String, holder: String, staleAfter: TimeInterval, now: Date,
        results: String? = nil, processed: Int? = nil, total: Int? = nil, logger: Logger
    ) async throws -> Bool {
        let nowText = Timestamp.string(now)
        let cutoff = Timestamp.string(now.addingTimeInterval(-staleAfter))
        let moved = try await c.run(
            """
            UPDATE background_jobs SET updated_at = \(nowText), results = COALESCE(\(results)::text, results),
                processed = COALESCE(\(processed)::integer, processed), total = COALESCE(\(total)::integer, total)
            WHERE id = \(jobID) AND status = 'running' AND updated_at >= \(cutoff)
            AND (kind = 'reconcile' OR EXISTS (SELECT 1 FROM sync_lease WHERE job_id = background_jobs.id AND holder = \(holder)))
            RETURNING 1
            """,
            logger)
        guard moved == 1 else {
            if let job = try await Self.fetchJob(c, id: jobID, logger: logger), job.isStale(now: now, staleAfter: staleAfter) {
                try await Self.markStale(c, job: job, logger: logger)
            }
            return false
        }
        _ = try await c.run(
            """
            UPDATE sync_lease SET expires_at = \(Timestamp.string(now.addingTimeInterval(staleAfter))), updated_at = \(nowText)
            WHERE job_id = \(jobID) AND holder = \(holder)
            """,
            logger)
        return true
    }

    public func heartbeat(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool {
        try await write { c in
            try await Self.lockJobAccount(c, jobID: jobID, logger: logger)
            return try await Self.beat(c, jobID: jobID, holder: holder, staleAfter: staleAfter, now: Date(), logger: logger)
        }
    }

    public func recordResult(jobID: String, holder: String, index: Int, result: SyncItemResult, total: Int?, staleAfter: TimeInterval) async throws -> Bool {
        let json = result.json
        return try await write { c in
            try await Self.lockJobAccount(c, jobID: jobID, logger: logger)
            guard let text = try await c.rows("SELECT results FROM background_jobs WHERE id = \(jobID)", logger).first?.text(0) else { return false }
            var results = (try? JSONParser.parse(Array(text.utf8)))?.arrayValue ?? []
            if index < results.count { results[index] = json } else { results.append(json) }
            return try await Self.beat(
                c, jobID: jobID, holder: holder, staleAfter: staleAfter, now: Date(),
                results: JSONValue.array(results).canonicalJSON, processed: results.count, total: total, logger: logger)
        }
    }

    public func finishJob(jobID: String, status: String, error: String?) async throws {
        let now = Timestamp.now()
        try await write { c in
            try await Self.lockJobAccount(c, jobID: jobID, logger: logger)
            _ = try await c.run(
                "UPDATE background_jobs SET status = \(status), error = \(error), updated_at = \(now) WHERE id = \(jobID) AND status = 'running'", logger)
            _ = try await c.run("DELETE FROM sync_lease WHERE job_id = \(jobID)", logger)
        }
    }

    // MARK: Mappings

    private static let taskColumns = "sync_list_id, trello_card_id, reminder_id, deleted, field_hashes, last_synced_at"

    private static func task(_ row: PostgresRow) throws -> SyncTaskRecord {
        let stampsText = try row.text(4)
        return try SyncTaskRecord(
            syncListID: row.text(0), cardID: row.text(1), reminderID: row.optionalText(2), deleted: row.bool(3),
            stamps: FieldStamps.decodeStamps(stampsText).mapValues { FieldStamp(hash: $0.hash, time: $0.time) }, lastSyncedAt: row.optionalText(5))
    }

    public func task(accountID: String, cardID: String) async throws -> SyncTaskRecord? {
        try await read { c in
            try await c.rows(
                "SELECT \(unescaped: Self.taskColumns) FROM sync_tasks WHERE account_id = \(accountID) AND trello_card_id = \(cardID)", logger
            ).first.map(Self.task)
        }
    }

    public func task(accountID: String, reminderID: String) async throws -> SyncTaskRecord? {
        try await read { c in
            try await c.rows(
                """
                SELECT \(unescaped: Self.taskColumns) FROM sync_tasks WHERE account_id = \(accountID) AND reminder_id = \(reminderID)
                ORDER BY CASE WHEN trello_card_id LIKE 'pending:%' THEN 1 WHEN deleted = false THEN 0 ELSE 2 END, updated_at DESC LIMIT 1
                """,
                logger
            ).first.map(Self.task)
        }
    }

    public func mappedCardIDs(accountID: String, syncListID: String) async throws -> Set<String> {
        try await read { c in
            Set(try await c.rows(
                """
                SELECT trello_card_id FROM sync_tasks
                WHERE account_id = \(accountID) AND sync_list_id = \(syncListID) AND reminder_id IS NOT NULL AND deleted = false
                """,
                logger
            ).map { try $0.text(0) })
        }
    }

    public func unackedChange(accountID: String, cardID: String) async throws -> PendingChange? {
        try await read { c in
            try await c.rows(
                """
                SELECT id, sync_list_id, change_type, changed_fields, fields, trello_action_id, created_at FROM pending_changes
                WHERE account_id = \(accountID) AND trello_card_id = \(cardID) AND superseded = false ORDER BY id DESC LIMIT 1
                """,
                logger
            ).first.map { row in
                let changedText = try row.text(3)
                let fieldsText = try row.text(4)
                let createdText = try row.text(6)
                return try PendingChange(
                    id: row.int64(0), accountID: accountID, syncListID: row.text(1), changeType: row.text(2),
                    changedFields: PendingChangeCoding.changedFields(changedText), fields: PendingChangeCoding.fields(fieldsText),
                    trelloCardID: cardID, trelloActionID: row.optionalText(5), reminderID: nil,
                    createdAt: Timestamp.date(createdText) ?? Date(timeIntervalSince1970: 0))
            }
        }
    }

    public func reserveCreate(accountID: String, syncListID: String, reminderID: String) async throws {
        let now = Timestamp.now()
        let placeholder = SyncTaskRecord.placeholderPrefix + reminderID
        try await write { c in
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
        try await write { c in
            _ = try await c.run("DELETE FROM sync_tasks WHERE account_id = \(accountID) AND trello_card_id = \(placeholder)", logger)
        }
    }

    public func recordSyncWrite(_ w: SyncWrite) async throws -> [Int64] {
        let now = Date()
        let nowText = Timestamp.string(now)
        return try await write { c in
            let key = AccountScoped(w.accountID, w.cardID)
            try await Self.lockAccounts(c, [key.accountID], logger: logger)
            let existing = try await c.rows(
                "SELECT field_hashes, deleted FROM sync_tasks WHERE account_id = \(w.accountID) AND trello_card_id = \(w.cardID)", logger
            ).first
            var stamps = try existing.map { try FieldStamps.decodeStamps($0.text(0)) } ?? [:]
            for (field, stamp) in w.stamps { stamps[field] = FieldStamps.Stamp(hash: stamp.hash, time: stamp.time) }
            let wasDeleted = try existing.map { try $0.bool(1) } ?? true
            if w.deleted {
                stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "removed", time: now.timeIntervalSince1970)
            } else if wasDeleted {
                stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "present", time: now.timeIntervalSince1970)
            }
            _ = try await c.run(
                """
                INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, reminder_id, field_hashes, deleted, last_synced_at, created_at, updated_at)
                VALUES (\(w.accountID), \(w.syncListID), \(w.cardID), \(w.reminderID), \(FieldStamps.encode(stamps)), \(w.deleted), \(nowText), \(nowText), \(nowText))
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                    reminder_id = COALESCE(excluded.reminder_id, sync_tasks.reminder_id), field_hashes = excluded.field_hashes,
                    deleted = excluded.deleted, last_synced_at = excluded.last_synced_at, updated_at = excluded.updated_at
                """,
                logger)
            if let reminder = w.reminderID {
                let placeholder = SyncTaskRecord.placeholderPrefix + reminder
                _ = try await c.run("DELETE FROM sync_tasks WHERE account_id = \(w.accountID) AND trello_card_id = \(placeholder)", logger)
            }
            if w.dropPending {
                _ = try await c.run("DELETE FROM pending_changes WHERE account_id = \(w.accountID) AND trello_card_id = \(w.cardID)", logger)
            } else {
                // The app's winning values that differ from the card's unacknowledged change (read before `load`).
                var overlap: [String: JSONValue] = [:]
                if !w.winning.isEmpty, let previous = try await c.rows(
                    """
                    SELECT change_type, fields FROM pending_changes
                    WHERE account_id = \(w.accountID) AND trello_card_id = \(w.cardID) AND superseded = false ORDER BY id DESC LIMIT 1
                    """,
                    logger
                ).first {
                    let previousType = try previous.text(0)
                    let previousFields = try PendingChangeCoding.fields(previous.text(1))
                    if previousType != "delete" {
                        overlap = w.winning.filter { name, value in previousFields[name].map { $0 != value } ?? false }
                    }
                }
                if !overlap.isEmpty || !w.toApps.isEmpty {
                    let observation = CardObservation(
                        accountID: w.accountID, syncListID: w.syncListID, cardID: w.cardID, actionID: nil, actionDate: now, kind: .removed)
                    let rows = try await PostgresChangeRows.load(c, keys: [key], logger: logger)
                    var applier = ChangeApplier(rows: rows)
                    if !overlap.isEmpty {
                        try applier.writeChange(observation, type: "update", changed: overlap.keys.sorted(), fields: overlap)
                    }
                    if !w.toApps.isEmpty {
                        let type = w.toApps == [SyncField.completed: .bool(true)] ? "complete" : "update"
                        try applier.writeChange(observation, type: type, changed: w.toApps.keys.sorted(), fields: w.toApps)
                    }
                    try await applier.rows.flush(c, logger: logger)
                }
            }
            var ids: [Int64] = []
            for conflict in w.conflicts {
                let trelloValue = conflict.trelloValue.canonicalJSON
                let remindersValue = conflict.remindersValue.canonicalJSON
                if let id = try await c.rows(
                    """
                    SELECT id FROM conflicts WHERE account_id = \(w.accountID) AND trello_card_id = \(w.cardID) AND field = \(conflict.field) AND status = 'open'
                    """,
                    logger
                ).first?.int64(0) {
                    _ = try await c.run(
                        """
                        UPDATE conflicts SET trello_value = \(trelloValue), reminders_value = \(remindersValue),
                            reminder_id = COALESCE(\(w.reminderID)::text, reminder_id), job_id = \(w.jobID) WHERE id = \(id)
                        """,
                        logger)
                    ids.append(id)
                } else {
                    let inserted = try await c.rows(
                        """
                        INSERT INTO conflicts (account_id, sync_list_id, sync_task_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at, job_id)
                        VALUES (\(w.accountID), \(w.syncListID), (SELECT id FROM sync_tasks WHERE account_id = \(w.accountID) AND trello_card_id = \(w.cardID)),
                            \(w.cardID), \(w.reminderID), \(conflict.field), \(trelloValue), \(remindersValue), 'open', \(nowText), \(w.jobID))
                        RETURNING id
                        """,
                        logger)
                    ids.append(try inserted[0].int64(0))
                }
            }
            return ids
        }
    }

    // MARK: Duplicates and conflicts

    public func addDuplicate(accountID: String, _ d: NewDuplicate) async throws -> Int64 {
        let now = Timestamp.now()
        let fields = JSONValue.object(d.fields).canonicalJSON
        return try await write { c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            if let id = try await c.rows(
                "SELECT id FROM potential_duplicates WHERE account_id = \(accountID) AND reminder_id = \(d.reminderID) AND status = 'open'", logger
            ).first?.int64(0) {
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
                VALUES (\(accountID), \(d.syncListID), \(d.reminderID), \(d.cardID), \(d.title), \(d.dueDate), \(d.jobID), 'open', \(now), \(fields))
                RETURNING id
                """,
                logger)
            return try inserted[0].int64(0)
        }
    }

    public func conflict(accountID: String, id: Int64) async throws -> ConflictDetail? {
        try await read { c in
            try await c.rows(
                """
                SELECT id, sync_list_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at, resolution, resolved_at
                FROM conflicts WHERE account_id = \(accountID) AND id = \(id)
                """,
                logger
            ).first.map { row in
                try ConflictDetail(
                    record: ConflictRecord(
                        id: row.int64(0), syncListID: row.optionalText(1), trelloCardID: row.optionalText(2), reminderID: row.optionalText(3),
                        field: row.text(4), trelloValue: row.optionalText(5), remindersValue: row.optionalText(6), status: row.text(7),
                        createdAt: row.text(8)),
                    resolution: row.optionalText(9), resolvedAt: row.optionalText(10))
            }
        }
    }

    public func resolveConflict(accountID: String, id: Int64, resolution: String) async throws -> Bool {
        let now = Timestamp.now()
        return try await write { c in
            try await c.run(
                """
                UPDATE conflicts SET status = 'resolved', resolution = \(resolution), resolved_at = \(now)
                WHERE account_id = \(accountID) AND id = \(id) AND status = 'open' RETURNING 1
                """,
                logger) == 1
        }
    }

    public func duplicate(accountID: String, id: Int64) async throws -> DuplicateDetail? {
        try await read { c in
            try await c.rows(
                """
                SELECT id, sync_list_id, reminder_id, trello_card_id, title, due_date, status, created_at, fields, resolved_at
                FROM potential_duplicates WHERE account_id = \(accountID) AND id = \(id)
                """,
                logger
            ).first.map { row in
                let fieldsText = try row.text(8)
                return try DuplicateDetail(
                    record: DuplicateRecord(
                        id: row.int64(0), syncListID: row.text(1), reminderID: row.optionalText(2), trelloCardID: row.text(3), title: row.text(4),
                        dueDate: row.optionalText(5), status: row.text(6), createdAt: row.text(7)),
                    fields: PendingChangeCoding.fields(fieldsText), resolvedAt: row.optionalText(9))
            }
        }
    }

    /// Claims an open conflict or duplicate for one resolution at a time (as in `SQLiteStore`).
    public func claimResolution(accountID: String, table: ResolutionTable, id: Int64) async throws -> Bool {
        let now = Date()
        let nowText = Timestamp.string(now)
        let expired = Timestamp.string(now.addingTimeInterval(-60))
        // One UPDATE: PostgreSQL re-checks its WHERE on the locked row, so two claims cannot both succeed.
        return try await write { c in
            try await c.run(
                """
                UPDATE \(unescaped: table.rawValue) SET resolving_at = \(nowText) WHERE account_id = \(accountID) AND id = \(id) AND status = 'open'
                AND (resolving_at IS NULL OR resolving_at < \(expired)) RETURNING 1
                """,
                logger) == 1
        }
    }

    public func releaseResolution(accountID: String, table: ResolutionTable, id: Int64) async throws {
        try await write { c in
            _ = try await c.run("UPDATE \(unescaped: table.rawValue) SET resolving_at = NULL WHERE account_id = \(accountID) AND id = \(id)", logger)
        }
    }

    public func resolveDuplicate(accountID: String, id: Int64, status: String) async throws -> Bool {
        let now = Timestamp.now()
        return try await write { c in
            try await c.run(
                """
                UPDATE potential_duplicates SET status = \(status), resolved_at = \(now)
                WHERE account_id = \(accountID) AND id = \(id) AND status = 'open' RETURNING 1
                """,
                logger) == 1
        }
    }

    // MARK: Import, settings

    public func importCards(accountID: String, syncListID: String, cards: [(cardID: String, fields: [String: JSONValue])]) async throws -> Int {
        guard !cards.isEmpty else { return 0 }
        let now = Date()
        let nowText = Timestamp.string(now)
        return try await write { c in
            let cardIDs = Array(Set(cards.map { $0.cardID }))
            try await Self.lockAccounts(c, [accountID], logger: logger)
            var mapped: [String: (reminderID: String?, deleted: Bool)] = [:]
            for row in try await c.rows(
                "SELECT trello_card_id, reminder_id, deleted FROM sync_tasks WHERE account_id = \(accountID) AND trello_card_id = ANY(\(cardIDs))", logger)
            {
                let card = try row.text(0)
                mapped[card] = try (row.optionalText(1), row.bool(2))
            }
            // Which cards to import, card by card as SQLiteStore decides (an import makes the task live for a repeat
            // of the card later in the batch); the last import of a card sets its stamps.
            var imported: [(cardID: String, fields: [String: JSONValue])] = []
            var order: [String] = []
            var hashes: [String: String] = [:]
            for card in cards {
                if let task = mapped[card.cardID], task.reminderID != nil, !task.deleted {
                    continue  // already on the devices
                }
                var stamps = card.fields.mapValues { FieldStamps.Stamp(hash: $0.fieldHash, time: now.timeIntervalSince1970) }
                stamps[FieldStamps.membership] = FieldStamps.Stamp(hash: "present", time: now.timeIntervalSince1970)
                if hashes[card.cardID] == nil { order.append(card.cardID) }
                hashes[card.cardID] = FieldStamps.encode(stamps)
                mapped[card.cardID] = (mapped[card.cardID]?.reminderID, false)
                imported.append(card)
            }
            guard !imported.isEmpty else { return 0 }
            let orderHashes = order.map { hashes[$0]! }
            _ = try await c.run(
                """
                INSERT INTO sync_tasks (account_id, sync_list_id, trello_card_id, field_hashes, deleted, created_at, updated_at)
                SELECT \(accountID), \(syncListID), t.card, t.hashes, false, \(nowText), \(nowText)
                FROM unnest(\(order)::text[], \(orderHashes)::text[]) AS t(card, hashes)
                ON CONFLICT (account_id, trello_card_id) DO UPDATE SET sync_list_id = excluded.sync_list_id,
                    field_hashes = excluded.field_hashes, deleted = false, updated_at = excluded.updated_at
                """,
                logger)
            let rows = try await PostgresChangeRows.load(c, keys: order.map { AccountScoped(accountID, $0) }, logger: logger)
            var applier = ChangeApplier(rows: rows)
            for card in imported {
                let observation = CardObservation(accountID: accountID, syncListID: syncListID, cardID: card.cardID, actionID: nil, actionDate: now, kind: .removed)
                try applier.writeChange(observation, type: "create", changed: card.fields.keys.sorted(), fields: card.fields)
            }
            try await applier.rows.flush(c, logger: logger)
            return applier.written
        }
    }

    public func priorityField(accountID: String, boardID: String) async throws -> PriorityField? {
        try await read { c in try await Self.priorityField(c, accountID: accountID, boardID: boardID, logger: logger) }
    }

    public func conflictPolicy(accountID: String) async throws -> (policy: String, deleteMode: String) {
        try await read { c in
            guard let row = try await c.rows("SELECT conflict_policy, delete_mode FROM accounts WHERE id = \(accountID)", logger).first else {
                return ("manual", "archive")
            }
            return try (row.text(0), row.text(1))
        }
    }
}
