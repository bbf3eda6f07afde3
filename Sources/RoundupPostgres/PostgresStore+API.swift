import Foundation
import Logging
import PostgresNIO
public import RoundupCore
public import RoundupStore

/// What `roundup-api` reads and writes, on PostgreSQL (as `SQLiteStore+API`). Every query names the account.
extension PostgresStore {
    public func accountID(tokenHash: String) async throws -> String? {
        try await read { [self] c in
            try await c.execute(PostgresStatements.AccountByToken(tokenHash: tokenHash), logger: logger).first { _ in true }
        }
    }

    public func rotateToken(accountID: String, newTokenHash: String) async throws {
        let now = Timestamp.now()
        try await write { [self] c in
            _ = try await c.run("UPDATE accounts SET auth_token_hash = \(newTokenHash), updated_at = \(now) WHERE id = \(accountID)", logger)
        }
    }

    public func accountDetails(id: String) async throws -> AccountDetails? {
        try await read { [self] c in try await Self.accountDetails(c, id: id, logger: logger) }
    }

    /// The account's row; `forUpdate` locks it for the rest of the transaction (a read-modify-write).
    static func accountDetails(_ c: PostgresConnection, id: String, forUpdate: Bool = false, logger: Logger) async throws -> AccountDetails? {
        try await c.rows(
            "SELECT \(unescaped: AccountDetails.columns) FROM accounts WHERE id = \(id)\(unescaped: forUpdate ? " FOR UPDATE" : "")", logger
        ).first.map(AccountDetails.init(stored:))
    }

    public func updateAccount(id: String, _ update: AccountUpdate) async throws -> AccountDetails? {
        let now = Timestamp.now()
        return try await write { [self] c in
            guard let account = try await Self.accountDetails(c, id: id, forUpdate: true, logger: logger)?.applying(update, at: now) else {
                return nil
            }
            _ = try await c.run(
                """
                UPDATE accounts SET trello_api_key = \(account.trelloAPIKey), trello_token = \(account.trelloToken),
                    trello_webhook_secret = \(account.trelloWebhookSecret), conflict_policy = \(account.conflictPolicy.rawValue),
                    delete_mode = \(account.deleteMode.rawValue), updated_at = \(account.updatedAt), needs_attention = \(account.needsAttention?.rawValue),
                    time_zone = \(account.timeZone?.rawValue)
                WHERE id = \(id)
                """,
                logger)
            return account
        }
    }

    public func deleteAccount(id: String) async throws -> [SyncListRecord] {
        try await write { [self] c in
            // The account's lock: a second delete running at once finds nothing, as on SQLite.
            try await Self.lockAccounts(c, [id], logger: logger)
            let lists = try await Self.syncLists(c, accountID: id, logger: logger)
            // Foreign keys cascade to lists, tasks, changes, devices and the rest.
            _ = try await c.run("DELETE FROM accounts WHERE id = \(id)", logger)
            return lists
        }
    }

    public func listCards(accountID: String, syncListID: String, after: Int64, limit: Int) async throws -> [ListCardRecord] {
        try await read { [self] c in
            try await c.rows(
                """
                SELECT \(unescaped: ListCardRecord.columns(values: "field_values::text")) FROM sync_tasks
                WHERE sync_list_id = \(syncListID) AND account_id = \(accountID) AND id > \(after) AND \(unescaped: ListCardRecord.live)
                ORDER BY id LIMIT \(limit)
                """, logger
            ).map(ListCardRecord.init(stored:))
        }
    }

    public func syncLists(accountID: String) async throws -> [SyncListRecord] {
        try await read { [self] c in try await Self.syncLists(c, accountID: accountID, logger: logger) }
    }

    static func syncLists(_ c: PostgresConnection, accountID: String, id: String? = nil, logger: Logger) async throws -> [SyncListRecord] {
        let rows: [PostgresRandomAccessRow]
        if let id {
            rows = try await c.rows(
                """
                SELECT id, name, trello_board_id, trello_list_id, list_webhook_id, board_webhook_id, created_at, last_reconciled_at, last_reconcile_error,
                       settings, trello_list_name, archived_at
                FROM sync_lists WHERE account_id = \(accountID) AND id = \(id) ORDER BY created_at, id
                """,
                logger)
        } else {
            rows = try await c.rows(
                """
                SELECT id, name, trello_board_id, trello_list_id, list_webhook_id, board_webhook_id, created_at, last_reconciled_at, last_reconcile_error,
                       settings, trello_list_name, archived_at
                FROM sync_lists WHERE account_id = \(accountID) ORDER BY created_at, id
                """,
                logger)
        }
        return try rows.map { row in
            try SyncListRecord(
                id: row.text(0), accountID: accountID, name: row.text(1), trelloBoardID: row.text(2), trelloListID: row.text(3),
                listWebhookID: row.optionalText(4), boardWebhookID: row.optionalText(5), createdAt: row.optionalText(6),
                lastReconciledAt: row.optionalText(7), lastReconcileError: row.optionalText(8), settings: SyncSettings(stored: row.optionalText(9)),
                trelloListName: row.optionalText(10), archivedAt: row.optionalText(11))
        }
    }

    public func setTrelloListState(
        accountID: String, id: String, name: String?, trelloListName: String, archivedAt: String?
    ) async throws
        -> SyncListRecord?
    {
        let now = Timestamp.now()
        return try await write { [self] c in
            try await c.run(
                """
                UPDATE sync_lists SET name = COALESCE(\(name)::text, name), trello_list_name = \(trelloListName), archived_at = \(archivedAt)::text,
                    updated_at = \(now)
                WHERE account_id = \(accountID) AND id = \(id)
                """, logger)
            return try await Self.syncLists(c, accountID: accountID, id: id, logger: logger).first
        }
    }

    public func updateSyncListSettings(accountID: String, id: String, settings: SyncSettings) async throws -> SyncListRecord? {
        let text = settings.storedText
        let now = Timestamp.now()
        return try await write { [self] c in
            _ = try await c.run(
                "UPDATE sync_lists SET settings = \(text), updated_at = \(now) WHERE account_id = \(accountID) AND id = \(id)", logger)
            return try await Self.syncLists(c, accountID: accountID, id: id, logger: logger).first
        }
    }

    public func syncList(accountID: String, id: String) async throws -> SyncListRecord? {
        try await read { [self] c in try await Self.syncLists(c, accountID: accountID, id: id, logger: logger).first }
    }

    public func setWebhooks(syncListID: String, listWebhookID: String?, boardWebhookID: String?) async throws {
        let now = Timestamp.now()
        try await write { [self] c in
            _ = try await c.run(
                "UPDATE sync_lists SET list_webhook_id = \(listWebhookID), board_webhook_id = \(boardWebhookID), updated_at = \(now) WHERE id = \(syncListID)",
                logger)
        }
    }

    public func deleteSyncList(accountID: String, id: String) async throws -> SyncListRecord? {
        try await write { [self] c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            guard let list = try await Self.syncLists(c, accountID: accountID, id: id, logger: logger).first else { return nil }
            _ = try await c.run("DELETE FROM sync_lists WHERE account_id = \(accountID) AND id = \(id)", logger)
            // Its history goes with it (no foreign key: a cascade could not use the account-first index).
            _ = try await c.run("DELETE FROM activity WHERE account_id = \(accountID) AND sync_list_id = \(id)", logger)
            return list
        }
    }

    public func acknowledge(accountID: String, acks: [ChangeAck]) async throws -> AckResult {
        guard !acks.isEmpty else { return .acked([]) }
        return try await write { [self] c in
            // The account's lock first, then the rows: no worker folds a change into one being acked meanwhile.
            try await Self.lockAccounts(c, [accountID], logger: logger)
            var rows = try await PostgresAckRows.load(c, ids: acks.map(\.id), logger: logger)
            let result = try Acknowledgement.run(accountID: accountID, acks: acks, rows: &rows)
            try await rows.flush(c, logger: logger)
            return result
        }
    }

    public func upsertDevice(
        accountID: String, deviceID: String, apnsToken: String, platform: DevicePlatform, environment: APNsEnvironment, bundleID: BundleID?
    ) async throws -> (DeviceRecord, created: Bool) {
        try await write { [self] c in
            let now = Timestamp.now()
            // One statement: it inserts, or updates and locks the existing row, so a concurrent delete (APNs refused
            // the old token) cannot slip between a check and the update. `xmax = 0` only for a row just inserted.
            let created = try await c.rows(
                """
                INSERT INTO devices (account_id, device_id, apns_token, platform, environment, bundle_id, created_at, updated_at)
                VALUES (\(accountID), \(deviceID), \(apnsToken), \(platform.rawValue), \(environment.rawValue), \(bundleID?.rawValue), \(now), \(now))
                ON CONFLICT (account_id, device_id) DO UPDATE SET apns_token = excluded.apns_token, platform = excluded.platform,
                    environment = excluded.environment, bundle_id = excluded.bundle_id, updated_at = excluded.updated_at
                RETURNING (xmax = 0)
                """,
                logger)[0].bool(0)
            let device = try await Self.devices(c, accountID: accountID, logger: logger).first { $0.deviceID == deviceID }!
            return (device, created)
        }
    }

    static func devices(_ c: PostgresConnection, accountID: String, logger: Logger) async throws -> [DeviceRecord] {
        try await c.rows(
            "SELECT \(unescaped: DeviceRecord.columns) FROM devices WHERE account_id = \(accountID) ORDER BY id", logger
        ).map(DeviceRecord.init(stored:))
    }

    public func devices(accountID: String) async throws -> [DeviceRecord] {
        try await read { [self] c in try await Self.devices(c, accountID: accountID, logger: logger) }
    }

    public func deleteDevice(accountID: String, deviceID: String) async throws -> Bool {
        try await write { [self] c in
            let deleted = try await c.run("DELETE FROM devices WHERE account_id = \(accountID) AND device_id = \(deviceID) RETURNING 1", logger) > 0
            // Its holds lapse now: the worker's `HoldLapseWaker` wakes the other devices for them.
            try await Self.lockAccounts(c, [accountID], logger: logger)
            try await c.run(
                """
                UPDATE pending_changes SET claimed_by = NULL, claimed_until = \(ChangeClaim.milliseconds(Date()))
                WHERE account_id = \(accountID) AND claimed_by = \(deviceID)
                """, logger)
            return deleted
        }
    }

    /// Deletes the device only while it still has this token (as in `SQLiteStore`).
    public func deleteDevice(accountID: String, deviceID: String, apnsToken: String) async throws -> Bool {
        try await write { [self] c in
            try await c.run(
                "DELETE FROM devices WHERE account_id = \(accountID) AND device_id = \(deviceID) AND apns_token = \(apnsToken) RETURNING 1", logger)
                > 0
        }
    }

    public func conflicts(accountID: String) async throws -> [ConflictRecord] {
        try await read { [self] c in
            try await c.rows("SELECT \(unescaped: ConflictRecord.columns) FROM conflicts WHERE account_id = \(accountID) ORDER BY id", logger)
                .map(ConflictRecord.init(stored:))
        }
    }

    public func duplicates(accountID: String) async throws -> [DuplicateRecord] {
        try await read { [self] c in
            try await c.rows(
                "SELECT \(unescaped: DuplicateRecord.columns) FROM potential_duplicates WHERE account_id = \(accountID) ORDER BY id", logger
            )
            .map(DuplicateRecord.init(stored:))
        }
    }

    public func ping() async throws {
        _ = try await read { [self] c in try await c.run("SELECT 1", logger) }
    }
}

extension PostgresStore {
    /// Every account, for operators (`roundupctl accounts list`).
    public func allAccounts() async throws -> [(details: AccountDetails, lists: Int, pendingChanges: Int)] {
        try await read { [self] c in
            try await c.rows(
                """
                SELECT \(unescaped: AccountDetails.columns),
                       (SELECT COUNT(*) FROM sync_lists l WHERE l.account_id = accounts.id),
                       (SELECT COUNT(*) FROM pending_changes p WHERE p.account_id = accounts.id AND p.superseded = false)
                FROM accounts ORDER BY created_at, id
                """,
                logger
            ).map { row in
                try (details: AccountDetails(stored: row), lists: row.int(10), pendingChanges: row.int(11))
            }
        }
    }

    public func jobs(limit: Int, id: String? = nil) async throws -> [JobRecord] {
        try await read { [self] c in
            let rows: [PostgresRandomAccessRow]
            if let id {
                rows = try await c.rows(
                    """
                    SELECT \(unescaped: JobRecord.columns) FROM background_jobs
                    WHERE id = \(id) ORDER BY created_at DESC LIMIT \(limit)
                    """,
                    logger)
            } else {
                rows = try await c.rows(
                    """
                    SELECT \(unescaped: JobRecord.columns) FROM background_jobs
                    ORDER BY created_at DESC LIMIT \(limit)
                    """,
                    logger)
            }
            return try rows.map(JobRecord.init(stored:))
        }
    }
}

/// `AckRows` over rows read up front; the writes wait in `writes` until `flush`, in the same transaction.
struct PostgresAckRows: AckRows {
    enum Write {
        case mapReminder(accountID: String, cardID: String, reminderID: String, now: String)
        case turnCreatesIntoUpdates(accountID: String, cardID: String, after: Int64)
        case deleteChange(accountID: String, id: Int64, cardID: String)
        case settleDuplicates(accountID: String, cardID: String, reminderID: String, now: String)
    }

    /// "Issued" = drawn from the sequence; unlike sqlite_sequence it also counts ids of rolled-back inserts, so acking
    /// one of those answers as acked (nothing is deleted) where SQLite says not found.
    var highest: Int64
    var changes: [Int64: AckedChange]
    var writes: [Write] = []

    static func load(_ c: PostgresConnection, ids: [Int64], logger: Logger) async throws -> Self {
        let highest =
            try await c.rows(
                "SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence('pending_changes', 'id')), 0)", logger
            ).first?.int64(0) ?? 0
        var changes: [Int64: AckedChange] = [:]
        for row in try await c.rows(
            "SELECT \(unescaped: AckedChange.columns), id FROM pending_changes WHERE id = ANY(\(ids))", logger)
        {
            changes[try row.int64(4)] = try AckedChange(stored: row)
        }
        return Self(highest: highest, changes: changes)
    }

    func highestIssuedChangeID() -> Int64 { highest }
    func change(id: Int64) -> AckedChange? { changes[id] }
    mutating func mapReminder(accountID: String, cardID: String, reminderID: String, now: String) {
        writes.append(.mapReminder(accountID: accountID, cardID: cardID, reminderID: reminderID, now: now))
    }
    mutating func turnCreatesIntoUpdates(accountID: String, cardID: String, after id: Int64) {
        writes.append(.turnCreatesIntoUpdates(accountID: accountID, cardID: cardID, after: id))
    }
    mutating func deleteChange(accountID: String, id: Int64, cardID: String) {
        writes.append(.deleteChange(accountID: accountID, id: id, cardID: cardID))
    }
    mutating func settleDuplicates(accountID: String, cardID: String, reminderID: String, now: String) {
        writes.append(.settleDuplicates(accountID: accountID, cardID: cardID, reminderID: reminderID, now: now))
    }

    func flush(_ c: PostgresConnection, logger: Logger) async throws {
        for write in writes {
            switch write {
            case .mapReminder(let account, let card, let reminder, let now):
                _ = try await c.run(
                    """
                    UPDATE sync_tasks SET reminder_id = \(reminder), last_synced_at = \(now), updated_at = \(now)
                    WHERE account_id = \(account) AND trello_card_id = \(card)
                    """, logger)
            case .turnCreatesIntoUpdates(let account, let card, let after):
                _ = try await c.run(
                    """
                    UPDATE pending_changes SET change_type = \(ChangeType.update.rawValue)
                    WHERE account_id = \(account) AND trello_card_id = \(card) AND superseded = false
                        AND change_type = \(ChangeType.create.rawValue) AND id > \(after)
                    """, logger)
            case .deleteChange(let account, let id, let card):
                _ = try await c.run(
                    """
                    DELETE FROM pending_changes
                    WHERE account_id = \(account) AND (id = \(id) OR (trello_card_id = \(card) AND superseded = true AND id < \(id)))
                    """, logger)
            case .settleDuplicates(let account, let card, let reminder, let now):
                _ = try await c.run(
                    """
                    UPDATE potential_duplicates SET status = \(DuplicateStatus.merged.rawValue), resolved_at = \(now)
                    WHERE account_id = \(account) AND reminder_id = \(reminder) AND status = \(DuplicateStatus.open.rawValue)
                        AND trello_card_id = \(card) AND resolving_at IS NULL
                    """, logger)
            }
        }
    }
}
