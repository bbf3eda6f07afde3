import Foundation
import GRDB
public import RoundupCore
public import RoundupStore

/// What `roundup-api` reads and writes: accounts, lists, acks, devices, conflicts, duplicates.
/// Every query names the account, so one account can never reach another's rows.
extension SQLiteStore {
    public func accountID(tokenHash: String) async throws -> String? {
        try await pool.read { db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT id FROM accounts WHERE auth_token_hash = ?"), arguments: [tokenHash])
        }
    }

    public func rotateToken(accountID: String, newTokenHash: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE accounts SET auth_token_hash = ?, updated_at = ? WHERE id = ?", arguments: [newTokenHash, Timestamp.now(), accountID])
        }
    }

    public func accountDetails(id: String) async throws -> AccountDetails? {
        try await pool.read { db in try Self.accountDetails(db, id: id) }
    }

    static func accountDetails(_ db: Database, id: String) throws -> AccountDetails? {
        try Row.fetchOne(db, sql: "SELECT \(AccountDetails.columns) FROM accounts WHERE id = ?", arguments: [id]).map(AccountDetails.init(stored:))
    }

    public func updateAccount(id: String, _ update: AccountUpdate) async throws -> AccountDetails? {
        let now = Timestamp.now()
        return try await pool.write { db in
            guard let account = try Self.accountDetails(db, id: id)?.applying(update, at: now) else { return nil }
            try db.execute(
                sql: """
                    UPDATE accounts SET trello_api_key = ?, trello_token = ?, trello_webhook_secret = ?, conflict_policy = ?, delete_mode = ?,
                        updated_at = ?, needs_attention = ?, time_zone = ?
                    WHERE id = ?
                    """,
                arguments: [
                    account.trelloAPIKey, account.trelloToken, account.trelloWebhookSecret, account.conflictPolicy, account.deleteMode,
                    account.updatedAt, account.needsAttention, account.timeZone?.rawValue, id,
                ])
            return account
        }
    }

    public func deleteAccount(id: String) async throws -> [SyncListRecord] {
        try await pool.write { db in
            let lists = try Self.syncLists(db, accountID: id)
            // Foreign keys cascade to lists, tasks, changes, devices and the rest.
            try db.execute(sql: "DELETE FROM accounts WHERE id = ?", arguments: [id])
            return lists
        }
    }

    public func listCards(accountID: String, syncListID: String, after: Int64, limit: Int) async throws -> [ListCardRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(ListCardRecord.columns()) FROM sync_tasks
                        WHERE sync_list_id = ? AND account_id = ? AND id > ? AND \(ListCardRecord.live) ORDER BY id LIMIT ?
                        """),
                arguments: [syncListID, accountID, after, limit]
            ).map(ListCardRecord.init(stored:))
        }
    }

    public func syncLists(accountID: String) async throws -> [SyncListRecord] {
        try await pool.read { db in try Self.syncLists(db, accountID: accountID) }
    }

    static func syncLists(_ db: Database, accountID: String, id: String? = nil) throws -> [SyncListRecord] {
        var sql = """
            SELECT id, name, trello_board_id, trello_list_id, list_webhook_id, board_webhook_id, created_at, last_reconciled_at, last_reconcile_error,
                   settings, trello_list_name, archived_at
            FROM sync_lists WHERE account_id = ?
            """
        var arguments: StatementArguments = [accountID]
        if let id {
            sql += " AND id = ?"
            arguments += [id]
        }
        return try Row.fetchAll(db, sql: sql + " ORDER BY created_at, id", arguments: arguments).map {
            SyncListRecord(
                id: $0[0], accountID: accountID, name: $0[1], trelloBoardID: $0[2], trelloListID: $0[3], listWebhookID: $0[4],
                boardWebhookID: $0[5], createdAt: $0[6], lastReconciledAt: $0[7], lastReconcileError: $0[8], settings: SyncSettings(stored: $0[9]),
                trelloListName: $0[10], archivedAt: $0[11])
        }
    }

    public func setTrelloListState(
        accountID: String, id: String, name: String?, trelloListName: String, archivedAt: String?
    ) async throws
        -> SyncListRecord?
    {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE sync_lists SET name = COALESCE(?, name), trello_list_name = ?, archived_at = ?, updated_at = ?
                    WHERE account_id = ? AND id = ?
                    """,
                arguments: [name, trelloListName, archivedAt, Timestamp.now(), accountID, id])
            return try Self.syncLists(db, accountID: accountID, id: id).first
        }
    }

    public func updateSyncListSettings(accountID: String, id: String, settings: SyncSettings) async throws -> SyncListRecord? {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE sync_lists SET settings = ?, updated_at = ? WHERE account_id = ? AND id = ?",
                arguments: [settings.storedText, Timestamp.now(), accountID, id])
            return try Self.syncLists(db, accountID: accountID, id: id).first
        }
    }

    public func syncList(accountID: String, id: String) async throws -> SyncListRecord? {
        try await pool.read { db in try Self.syncLists(db, accountID: accountID, id: id).first }
    }

    public func setWebhooks(syncListID: String, listWebhookID: String?, boardWebhookID: String?) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE sync_lists SET list_webhook_id = ?, board_webhook_id = ?, updated_at = ? WHERE id = ?",
                arguments: [listWebhookID, boardWebhookID, Timestamp.now(), syncListID])
        }
    }

    public func deleteSyncList(accountID: String, id: String) async throws -> SyncListRecord? {
        try await pool.write { db in
            guard let list = try Self.syncLists(db, accountID: accountID, id: id).first else { return nil }
            try db.execute(sql: "DELETE FROM sync_lists WHERE account_id = ? AND id = ?", arguments: [accountID, id])
            // Its history goes with it (no foreign key: a cascade could not use the account-first index).
            try db.execute(sql: "DELETE FROM activity WHERE account_id = ? AND sync_list_id = ?", arguments: [accountID, id])
            return list
        }
    }

    public func acknowledge(accountID: String, acks: [ChangeAck]) async throws -> AckResult {
        guard !acks.isEmpty else { return .acked([]) }
        return try await pool.write { db in
            var rows = SQLiteAckRows(db: db)
            return try Acknowledgement.run(accountID: accountID, acks: acks, rows: &rows)
        }
    }

    public func upsertDevice(
        accountID: String, deviceID: String, apnsToken: String, platform: DevicePlatform, environment: APNsEnvironment, bundleID: BundleID?
    ) async throws -> (DeviceRecord, created: Bool) {
        try await pool.write { db in
            let now = Timestamp.now()
            let exists =
                try Bool.fetchOne(db, sql: "SELECT 1 FROM devices WHERE account_id = ? AND device_id = ?", arguments: [accountID, deviceID]) ?? false
            if exists {
                try db.execute(
                    sql:
                        "UPDATE devices SET apns_token = ?, platform = ?, environment = ?, bundle_id = ?, updated_at = ? WHERE account_id = ? AND device_id = ?",
                    arguments: [apnsToken, platform, environment, bundleID?.rawValue, now, accountID, deviceID])
            } else {
                try db.execute(
                    sql:
                        "INSERT INTO devices (account_id, device_id, apns_token, platform, environment, bundle_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    arguments: [accountID, deviceID, apnsToken, platform, environment, bundleID?.rawValue, now, now])
            }
            let device = try Self.devices(db, accountID: accountID).first { $0.deviceID == deviceID }!
            return (device, !exists)
        }
    }

    static func devices(_ db: Database, accountID: String) throws -> [DeviceRecord] {
        try Row.fetchAll(
            db, sql: "SELECT \(DeviceRecord.columns) FROM devices WHERE account_id = ? ORDER BY id", arguments: [accountID]
        ).map(DeviceRecord.init(stored:))
    }

    public func devices(accountID: String) async throws -> [DeviceRecord] {
        try await pool.read { db in try Self.devices(db, accountID: accountID) }
    }

    public func deleteDevice(accountID: String, deviceID: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM devices WHERE account_id = ? AND device_id = ?", arguments: [accountID, deviceID])
            let deleted = db.changesCount > 0
            // Its holds lapse now: the worker's `HoldLapseWaker` wakes the other devices for them.
            try db.execute(
                sql: "UPDATE pending_changes SET claimed_by = NULL, claimed_until = ? WHERE account_id = ? AND claimed_by = ?",
                arguments: [ChangeClaim.milliseconds(Date()), accountID, deviceID])
            return deleted
        }
    }

    /// Deletes the device only while it still has this token (APNs refused that token; a newer one may be registered).
    public func deleteDevice(accountID: String, deviceID: String, apnsToken: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM devices WHERE account_id = ? AND device_id = ? AND apns_token = ?", arguments: [accountID, deviceID, apnsToken])
            return db.changesCount > 0
        }
    }

    public func conflicts(accountID: String) async throws -> [ConflictRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT \(ConflictRecord.columns) FROM conflicts WHERE account_id = ? ORDER BY id", arguments: [accountID])
                .map(ConflictRecord.init(stored:))
        }
    }

    public func duplicates(accountID: String) async throws -> [DuplicateRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT \(DuplicateRecord.columns) FROM potential_duplicates WHERE account_id = ? ORDER BY id", arguments: [accountID]
            )
            .map(DuplicateRecord.init(stored:))
        }
    }

    public func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }
}

extension SQLiteStore {
    /// Every account, for operators (`roundupctl accounts list`).
    public func allAccounts() async throws -> [(details: AccountDetails, lists: Int, pendingChanges: Int)] {
        try await pool.read { db in
            let ids = try String.fetchAll(db, sql: "SELECT id FROM accounts ORDER BY created_at, id")
            return try ids.compactMap { id in
                guard let details = try Self.accountDetails(db, id: id) else { return nil }
                let lists = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM sync_lists WHERE account_id = ?", arguments: [id]) ?? 0
                let pending =
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM pending_changes WHERE account_id = ? AND superseded = 0", arguments: [id]) ?? 0
                return (details, lists, pending)
            }
        }
    }
}

extension SQLiteStore {
    public func jobs(limit: Int, id: String? = nil) async throws -> [JobRecord] {
        try await pool.read { db in
            var sql = "SELECT \(JobRecord.columns) FROM background_jobs"
            var arguments: StatementArguments = []
            if let id {
                sql += " WHERE id = ?"
                arguments += [id]
            }
            sql += " ORDER BY created_at DESC LIMIT ?"
            arguments += [limit]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map(JobRecord.init(stored:))
        }
    }
}

/// `AckRows` as statements in SQLite's write transaction.
struct SQLiteAckRows: AckRows {
    let db: Database

    func highestIssuedChangeID() throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'pending_changes'") ?? 0
    }

    func change(id: Int64) throws -> AckedChange? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT \(AckedChange.columns) FROM pending_changes WHERE id = ?"), arguments: [id]
        ).map(AckedChange.init(stored:))
    }

    func mapReminder(accountID: String, cardID: String, reminderID: String, now: String) throws {
        try db.cachedStatement(
            sql: "UPDATE sync_tasks SET reminder_id = ?, last_synced_at = ?, updated_at = ? WHERE account_id = ? AND trello_card_id = ?"
        )
        .execute(arguments: [reminderID, now, now, accountID, cardID])
    }

    func turnCreatesIntoUpdates(accountID: String, cardID: String, after id: Int64) throws {
        try db.cachedStatement(
            sql: """
                UPDATE pending_changes SET change_type = ?
                WHERE account_id = ? AND trello_card_id = ? AND superseded = 0 AND change_type = ? AND id > ?
                """
        ).execute(arguments: [ChangeType.update, accountID, cardID, ChangeType.create, id])
    }

    func deleteChange(accountID: String, id: Int64, cardID: String) throws {
        try db.cachedStatement(
            sql: "DELETE FROM pending_changes WHERE account_id = ? AND (id = ? OR (trello_card_id = ? AND superseded = 1 AND id < ?))"
        )
        .execute(arguments: [accountID, id, cardID, id])
    }

    func settleDuplicates(accountID: String, cardID: String, reminderID: String, now: String) throws {
        try db.cachedStatement(
            sql: """
                UPDATE potential_duplicates SET status = ?, resolved_at = ?
                WHERE account_id = ? AND reminder_id = ? AND status = ? AND trello_card_id = ? AND resolving_at IS NULL
                """
        ).execute(arguments: [DuplicateStatus.merged, now, accountID, reminderID, DuplicateStatus.open, cardID])
    }
}
