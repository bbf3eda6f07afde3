import Foundation
import Logging
import PostgresNIO
public import RoundupCore
public import RoundupStore

/// Reconciliation and webhook health, on PostgreSQL (as `SQLiteStore+Reconcile`).
extension PostgresStore: ReconcileStore {
    public func allSyncLists() async throws -> [(list: SyncListRecord, needsAttention: Bool)] {
        try await read { [self] c in
            try await c.rows(
                """
                SELECT l.id, l.account_id, l.name, l.trello_board_id, l.trello_list_id, l.list_webhook_id, l.board_webhook_id, l.created_at,
                       l.last_reconciled_at, l.last_reconcile_error, a.needs_attention IS NOT NULL, l.settings, l.trello_list_name, l.archived_at
                FROM sync_lists l JOIN accounts a ON a.id = l.account_id ORDER BY l.created_at, l.id
                """,
                logger
            ).map { row in
                try (
                    list: SyncListRecord(
                        id: row.text(0), accountID: row.text(1), name: row.text(2), trelloBoardID: row.text(3), trelloListID: row.text(4),
                        listWebhookID: row.optionalText(5), boardWebhookID: row.optionalText(6), createdAt: row.optionalText(7),
                        lastReconciledAt: row.optionalText(8), lastReconcileError: row.optionalText(9),
                        settings: SyncSettings(stored: row.optionalText(11)), trelloListName: row.optionalText(12), archivedAt: row.optionalText(13)),
                    needsAttention: row.bool(10)
                )
            }
        }
    }

    public func markReconciled(syncListID: String, succeeded: Bool, error: String?) async throws {
        let now = Timestamp.now()
        try await write { [self] c in
            if succeeded {
                _ = try await c.run(
                    "UPDATE sync_lists SET last_reconciled_at = \(now), last_reconcile_error = \(error) WHERE id = \(syncListID)", logger)
            } else {
                _ = try await c.run("UPDATE sync_lists SET last_reconcile_error = \(error) WHERE id = \(syncListID)", logger)
            }
        }
    }

    @discardableResult
    public func setNeedsAttention(accountID: String, reason: AttentionReason?, whileToken: String?) async throws -> Bool {
        try await write { [self] c in
            guard
                let row = try await c.rows("SELECT trello_token FROM accounts WHERE id = \(accountID) FOR UPDATE", logger).first,
                AttentionFlag.applies(storedToken: try row.optionalText(0), whileToken: whileToken)
            else { return false }
            return try await c.run("UPDATE accounts SET needs_attention = \(reason?.rawValue) WHERE id = \(accountID) RETURNING 1", logger) == 1
        }
    }

    public func liveCardIDs(accountID: String, syncListID: String) async throws -> [String] {
        try await read { [self] c in
            try await c.rows(
                "SELECT trello_card_id, deleted FROM sync_tasks WHERE account_id = \(accountID) AND sync_list_id = \(syncListID)", logger
            ).compactMap { row in
                let card = try row.text(0)
                return SyncTaskRecord.isLive(cardID: card, deleted: try row.bool(1)) ? card : nil
            }
        }
    }

    public func replaceWebhook(accountID: String, old: String?, new: String, board: Bool, syncListID: String) async throws {
        let column = board ? "board_webhook_id" : "list_webhook_id"
        let now = Timestamp.now()
        try await write { [self] c in
            _ = try await c.run("UPDATE sync_lists SET \(unescaped: column) = \(new), updated_at = \(now) WHERE id = \(syncListID)", logger)
            if let old {
                _ = try await c.run(
                    "UPDATE sync_lists SET \(unescaped: column) = \(new) WHERE account_id = \(accountID) AND \(unescaped: column) = \(old)", logger)
            }
        }
    }
}
