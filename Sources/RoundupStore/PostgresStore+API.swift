import Foundation
import Logging
import PostgresNIO
import RoundupCore

/// What `roundup-api` reads and writes, on PostgreSQL (as `SQLiteStore+API`). Every query names the account.
extension PostgresStore {
    public func accountID(tokenHash: String) async throws -> String? {
        try await read { c in
            try await c.rows("SELECT id FROM accounts WHERE auth_token_hash = \(tokenHash)", logger).first?.text(0)
        }
    }

    public func rotateToken(accountID: String, newTokenHash: String) async throws {
        let now = Timestamp.now()
        try await write { c in
            _ = try await c.run("UPDATE accounts SET auth_token_hash = \(newTokenHash), updated_at = \(now) WHERE id = \(accountID)", logger)
        }
    }

    public func accountDetails(id: String) async throws -> AccountDetails? {
        try await read { c in try await Self.accountDetails(c, id: id, logger: logger) }
    }

    static func accountDetails(_ c: PostgresConnection, id: String, logger: Logger) async throws -> AccountDetails? {
        try await c.rows(
            """
            SELECT id, trello_api_key, trello_token, trello_webhook_secret, conflict_policy, delete_mode, created_at, updated_at,
                   needs_attention
            FROM accounts WHERE id = \(id)
            """,
            logger
        ).first.map(Self.details)
    }

    /// Columns 0…8 as `accountDetails` selects them.
    private static func details(_ row: PostgresRow) throws -> AccountDetails {
        try AccountDetails(
            id: row.text(0), trelloAPIKey: row.optionalText(1), trelloToken: row.optionalText(2), trelloWebhookSecret: row.optionalText(3),
            conflictPolicy: row.text(4), deleteMode: row.text(5), createdAt: row.text(6), updatedAt: row.text(7), needsAttention: row.optionalText(8))
    }

    public func updateAccount(id: String, _ update: AccountUpdate) async throws -> AccountDetails? {
        try await write { c in
            _ = try await c.run(
                """
                UPDATE accounts SET trello_api_key = COALESCE(\(update.trelloAPIKey)::text, trello_api_key),
                    trello_token = COALESCE(\(update.trelloToken)::text, trello_token),
                    trello_webhook_secret = COALESCE(\(update.trelloWebhookSecret)::text, trello_webhook_secret),
                    conflict_policy = COALESCE(\(update.conflictPolicy)::text, conflict_policy),
                    delete_mode = COALESCE(\(update.deleteMode)::text, delete_mode), updated_at = \(Timestamp.now()),
                    needs_attention = CASE WHEN \(update.trelloToken)::text IS NOT NULL OR \(update.trelloAPIKey)::text IS NOT NULL
                        THEN NULL ELSE needs_attention END
                WHERE id = \(id)
                """,
                logger)
            return try await Self.accountDetails(c, id: id, logger: logger)
        }
    }

    public func deleteAccount(id: String) async throws -> [SyncListRecord] {
        try await write { c in
            // The account's lock: a second delete running at once finds nothing, as on SQLite.
            try await Self.lockAccounts(c, [id], logger: logger)
            let lists = try await Self.syncLists(c, accountID: id, logger: logger)
            // Foreign keys cascade to lists, tasks, changes, devices and the rest.
            _ = try await c.run("DELETE FROM accounts WHERE id = \(id)", logger)
            return lists
        }
    }

    public func syncLists(accountID: String) async throws -> [SyncListRecord] {
        try await read { c in try await Self.syncLists(c, accountID: accountID, logger: logger) }
    }

    static func syncLists(_ c: PostgresConnection, accountID: String, id: String? = nil, logger: Logger) async throws -> [SyncListRecord] {
        let rows: [PostgresRow]
        if let id {
            rows = try await c.rows(
                """
                SELECT id, name, trello_board_id, trello_list_id, list_webhook_id, board_webhook_id, created_at, last_reconciled_at, last_reconcile_error
                FROM sync_lists WHERE account_id = \(accountID) AND id = \(id) ORDER BY created_at, id
                """,
                logger)
        } else {
            rows = try await c.rows(
                """
                SELECT id, name, trello_board_id, trello_list_id, list_webhook_id, board_webhook_id, created_at, last_reconciled_at, last_reconcile_error
                FROM sync_lists WHERE account_id = \(accountID) ORDER BY created_at, id
                """,
                logger)
        }
        return try rows.map { row in
            try SyncListRecord(
                id: row.text(0), accountID: accountID, name: row.text(1), trelloBoardID: row.text(2), trelloListID: row.text(3),
                listWebhookID: row.optionalText(4), boardWebhookID: row.optionalText(5), createdAt: row.optionalText(6),
                lastReconciledAt: row.optionalText(7), lastReconcileError: row.optionalText(8))
        }
    }

    public func syncList(accountID: String, id: String) async throws -> SyncListRecord? {
        try await read { c in try await Self.syncLists(c, accountID: accountID, id: id, logger: logger).first }
    }

    public func setWebhooks(syncListID: String, listWebhookID: String?, boardWebhookID: String?) async throws {
        let now = Timestamp.now()
        try await write { c in
            _ = try await c.run(
                "UPDATE sync_lists SET list_webhook_id = \(listWebhookID), board_webhook_id = \(boardWebhookID), updated_at = \(now) WHERE id = \(syncListID)",
                logger)
        }
    }

    public func deleteSyncList(accountID: String, id: String) async throws -> SyncListRecord? {
        try await write { c in
            try await Self.lockAccounts(c, [accountID], logger: logger)
            guard let list = try await Self.syncLists(c, accountID: accountID, id: id, logger: logger).first else { return nil }
            _ = try await c.run("DELETE FROM sync_lists WHERE account_id = \(accountID) AND id = \(id)", logger)
            return list
        }
    }

    public func acknowledge(accountID: String, acks: [ChangeAck]) async throws -> AckResult {
        guard !acks.isEmpty else { return .acked([]) }
        let ids = acks.map(\.id)
        return try await write { c in
            // The account's lock first, then the rows: no worker folds a change into one being acked meanwhile.
            try await Self.lockAccounts(c, [accountID], logger: logger)

            // Check every id first: all or nothing.
            // "Issued" = drawn from the sequence; unlike sqlite_sequence it also counts ids of rolled-back inserts, so acking one
            // of those answers as acked (nothing is deleted) where SQLite says not found.
            let highest = try await c.rows(
                "SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence('pending_changes', 'id')), 0)", logger
            ).first?.int64(0) ?? 0
            var found: [Int64: (account: String, card: String, type: String, superseded: Bool)] = [:]
            for row in try await c.rows(
                "SELECT id, account_id, trello_card_id, change_type, superseded FROM pending_changes WHERE id = ANY(\(ids))", logger)
            {
                let id = try row.int64(0)
                found[id] = try (row.text(1), row.text(2), row.text(3), row.bool(4))
            }
            var rows: [Int64: (card: String, type: String, superseded: Bool)] = [:]
            for ack in acks {
                if let row = found[ack.id] {
                    guard row.account == accountID else { return .notFound(ack.id) }
                    rows[ack.id] = (row.card, row.type, row.superseded)
                } else if ack.id <= 0 || ack.id > highest {
                    return .notFound(ack.id)  // never issued
                }
                // Otherwise it was acked or folded away already: acking again is fine.
            }
            let now = Timestamp.now()
            for ack in acks {
                guard let (card, type, superseded) = rows[ack.id] else { continue }
                if let reminder = ack.reminderID, type == "create" || type == "update" || type == "complete" {
                    _ = try await c.run(
                        """
                        UPDATE sync_tasks SET reminder_id = \(reminder), last_synced_at = \(now), updated_at = \(now)
                        WHERE account_id = \(accountID) AND trello_card_id = \(card)
                        """,
                        logger)
                    if superseded, type == "create" {
                        // The newer change the acked create was folded into must update that reminder, not make a second.
                        _ = try await c.run(
                            """
                            UPDATE pending_changes SET change_type = 'update'
                            WHERE account_id = \(accountID) AND trello_card_id = \(card) AND superseded = false AND change_type = 'create' AND id > \(ack.id)
                            """,
                            logger)
                    }
                }
                // The change, and the older changes it replaced.
                _ = try await c.run(
                    """
                    DELETE FROM pending_changes
                    WHERE account_id = \(accountID) AND (id = \(ack.id) OR (trello_card_id = \(card) AND superseded = true AND id < \(ack.id)))
                    """,
                    logger)
            }
            return .acked(ids)
        }
    }

    public func upsertDevice(accountID: String, deviceID: String, apnsToken: String, platform: String, environment: String) async throws -> (DeviceRecord, created: Bool) {
        try await write { c in
            let now = Timestamp.now()
            // One statement: it inserts, or updates and locks the existing row, so a concurrent delete (APNs refused
            // the old token) cannot slip between a check and the update. `xmax = 0` only for a row just inserted.
            let created = try await c.rows(
                """
                INSERT INTO devices (account_id, device_id, apns_token, platform, environment, created_at, updated_at)
                VALUES (\(accountID), \(deviceID), \(apnsToken), \(platform), \(environment), \(now), \(now))
                ON CONFLICT (account_id, device_id) DO UPDATE SET apns_token = excluded.apns_token, platform = excluded.platform,
                    environment = excluded.environment, updated_at = excluded.updated_at
                RETURNING (xmax = 0)
                """,
                logger)[0].bool(0)
            let device = try await Self.devices(c, accountID: accountID, logger: logger).first { $0.deviceID == deviceID }!
            return (device, created)
        }
    }

    static func devices(_ c: PostgresConnection, accountID: String, logger: Logger) async throws -> [DeviceRecord] {
        try await c.rows(
            "SELECT device_id, apns_token, platform, environment, created_at, updated_at FROM devices WHERE account_id = \(accountID) ORDER BY id",
            logger
        ).map { row in
            try DeviceRecord(
                deviceID: row.text(0), apnsToken: row.text(1), platform: row.text(2), environment: row.text(3), createdAt: row.text(4), updatedAt: row.text(5))
        }
    }

    public func devices(accountID: String) async throws -> [DeviceRecord] {
        try await read { c in try await Self.devices(c, accountID: accountID, logger: logger) }
    }

    public func deleteDevice(accountID: String, deviceID: String) async throws -> Bool {
        try await write { c in
            try await c.run("DELETE FROM devices WHERE account_id = \(accountID) AND device_id = \(deviceID) RETURNING 1", logger) > 0
        }
    }

    /// Deletes the device only while it still has this token (as in `SQLiteStore`).
    public func deleteDevice(accountID: String, deviceID: String, apnsToken: String) async throws -> Bool {
        try await write { c in
            try await c.run(
                "DELETE FROM devices WHERE account_id = \(accountID) AND device_id = \(deviceID) AND apns_token = \(apnsToken) RETURNING 1", logger) > 0
        }
    }

    public func conflicts(accountID: String) async throws -> [ConflictRecord] {
        try await read { c in
            try await c.rows(
                """
                SELECT id, sync_list_id, trello_card_id, reminder_id, field, trello_value, reminders_value, status, created_at
                FROM conflicts WHERE account_id = \(accountID) ORDER BY id
                """,
                logger
            ).map { row in
                try ConflictRecord(
                    id: row.int64(0), syncListID: row.optionalText(1), trelloCardID: row.optionalText(2), reminderID: row.optionalText(3),
                    field: row.text(4), trelloValue: row.optionalText(5), remindersValue: row.optionalText(6), status: row.text(7), createdAt: row.text(8))
            }
        }
    }

    public func duplicates(accountID: String) async throws -> [DuplicateRecord] {
        try await read { c in
            try await c.rows(
                """
                SELECT id, sync_list_id, reminder_id, trello_card_id, title, due_date, status, created_at
                FROM potential_duplicates WHERE account_id = \(accountID) ORDER BY id
                """,
                logger
            ).map { row in
                try DuplicateRecord(
                    id: row.int64(0), syncListID: row.text(1), reminderID: row.optionalText(2), trelloCardID: row.text(3), title: row.text(4),
                    dueDate: row.optionalText(5), status: row.text(6), createdAt: row.text(7))
            }
        }
    }

    public func ping() async throws {
        _ = try await read { c in try await c.run("SELECT 1", logger) }
    }
}

extension PostgresStore {
    /// Every account, for operators (`roundupctl accounts list`).
    public func allAccounts() async throws -> [(details: AccountDetails, lists: Int, pendingChanges: Int)] {
        try await read { c in
            try await c.rows(
                """
                SELECT a.id, a.trello_api_key, a.trello_token, a.trello_webhook_secret, a.conflict_policy, a.delete_mode, a.created_at, a.updated_at,
                       a.needs_attention,
                       (SELECT COUNT(*) FROM sync_lists l WHERE l.account_id = a.id),
                       (SELECT COUNT(*) FROM pending_changes p WHERE p.account_id = a.id AND p.superseded = false)
                FROM accounts a ORDER BY a.created_at, a.id
                """,
                logger
            ).map { row in
                try (details: Self.details(row), lists: row.int(9), pendingChanges: row.int(10))
            }
        }
    }

    public func jobs(limit: Int, id: String? = nil) async throws -> [JobRecord] {
        try await read { c in
            let rows: [PostgresRow]
            if let id {
                rows = try await c.rows(
                    """
                    SELECT id, account_id, kind, status, processed, total, error, created_at, updated_at FROM background_jobs
                    WHERE id = \(id) ORDER BY created_at DESC LIMIT \(limit)
                    """,
                    logger)
            } else {
                rows = try await c.rows(
                    """
                    SELECT id, account_id, kind, status, processed, total, error, created_at, updated_at FROM background_jobs
                    ORDER BY created_at DESC LIMIT \(limit)
                    """,
                    logger)
            }
            return try rows.map { row in
                try JobRecord(
                    id: row.text(0), accountID: row.text(1), kind: row.text(2), status: row.text(3), processed: row.int(4), total: row.int(5),
                    error: row.optionalText(6), createdAt: row.text(7), updatedAt: row.text(8))
            }
        }
    }
}
