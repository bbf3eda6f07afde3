import GRDB
import RoundupStore

/// Versioned schema: the sixteen tables of the reference design and the activity history, less the six never used (v12).
/// Migrations only ever append.
enum SQLiteMigrations {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-reference-schema") { db in
            try db.execute(
                sql: """
                    CREATE TABLE accounts (
                        id TEXT PRIMARY KEY,
                        auth_token_hash TEXT NOT NULL UNIQUE,
                        trello_api_key TEXT,
                        trello_token TEXT,
                        trello_webhook_secret TEXT,
                        conflict_policy TEXT NOT NULL DEFAULT 'manual'
                            CHECK (conflict_policy IN ('manual', 'lww', 'prefer_trello', 'prefer_reminders')),
                        delete_mode TEXT NOT NULL DEFAULT 'archive' CHECK (delete_mode IN ('archive', 'delete')),
                        created_at TEXT NOT NULL,
                        updated_at TEXT NOT NULL
                    );
                    CREATE TABLE sync_lists (
                        id TEXT PRIMARY KEY,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        name TEXT NOT NULL,
                        trello_board_id TEXT NOT NULL,
                        trello_list_id TEXT NOT NULL,
                        list_webhook_id TEXT,
                        board_webhook_id TEXT,
                        created_at TEXT NOT NULL,
                        updated_at TEXT NOT NULL,
                        UNIQUE (account_id, trello_list_id)
                    );
                    CREATE INDEX sync_lists_trello_list ON sync_lists(trello_list_id);
                    CREATE INDEX sync_lists_account_board ON sync_lists(account_id, trello_board_id);
                    CREATE TABLE sync_tasks (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_list_id TEXT NOT NULL REFERENCES sync_lists(id) ON DELETE CASCADE,
                        trello_card_id TEXT NOT NULL,
                        reminder_id TEXT,
                        field_hashes TEXT NOT NULL DEFAULT '{}',
                        deleted INTEGER NOT NULL DEFAULT 0,
                        last_action_id TEXT,
                        last_synced_at TEXT,
                        created_at TEXT NOT NULL,
                        updated_at TEXT NOT NULL,
                        UNIQUE (account_id, trello_card_id)
                    );
                    CREATE INDEX sync_tasks_reminder ON sync_tasks(account_id, reminder_id);
                    CREATE INDEX sync_tasks_list ON sync_tasks(sync_list_id);
                    CREATE TABLE pending_changes (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_list_id TEXT NOT NULL REFERENCES sync_lists(id) ON DELETE CASCADE,
                        change_type TEXT NOT NULL CHECK (change_type IN ('create', 'update', 'complete', 'delete')),
                        changed_fields TEXT NOT NULL,
                        fields TEXT NOT NULL,
                        trello_card_id TEXT NOT NULL,
                        trello_action_id TEXT,
                        created_at TEXT NOT NULL
                    );
                    CREATE INDEX pending_changes_account ON pending_changes(account_id, id);
                    CREATE INDEX pending_changes_card ON pending_changes(account_id, trello_card_id);
                    CREATE TABLE devices (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        device_id TEXT NOT NULL,
                        apns_token TEXT NOT NULL,
                        platform TEXT NOT NULL CHECK (platform IN ('ios', 'macos')),
                        environment TEXT NOT NULL CHECK (environment IN ('production', 'sandbox')),
                        created_at TEXT NOT NULL,
                        updated_at TEXT NOT NULL,
                        UNIQUE (account_id, device_id)
                    );
                    CREATE TABLE conflicts (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_list_id TEXT REFERENCES sync_lists(id) ON DELETE CASCADE,
                        sync_task_id INTEGER REFERENCES sync_tasks(id) ON DELETE CASCADE,
                        trello_card_id TEXT,
                        reminder_id TEXT,
                        field TEXT NOT NULL,
                        trello_value TEXT,
                        reminders_value TEXT,
                        status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
                        resolution TEXT,
                        created_at TEXT NOT NULL,
                        resolved_at TEXT
                    );
                    CREATE INDEX conflicts_account ON conflicts(account_id, status);
                    CREATE TABLE sync_attachments (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_task_id INTEGER NOT NULL REFERENCES sync_tasks(id) ON DELETE CASCADE,
                        trello_attachment_id TEXT NOT NULL,
                        name TEXT,
                        url TEXT,
                        is_upload INTEGER NOT NULL DEFAULT 0,
                        created_at TEXT NOT NULL,
                        UNIQUE (sync_task_id, trello_attachment_id)
                    );
                    CREATE TABLE sync_custom_fields (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        trello_board_id TEXT NOT NULL,
                        trello_field_id TEXT NOT NULL,
                        name TEXT NOT NULL,
                        type TEXT NOT NULL,
                        options TEXT NOT NULL DEFAULT '{}',
                        fetched_at TEXT NOT NULL,
                        UNIQUE (account_id, trello_board_id, trello_field_id)
                    );
                    CREATE TABLE sync_locations (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_task_id INTEGER NOT NULL UNIQUE REFERENCES sync_tasks(id) ON DELETE CASCADE,
                        name TEXT,
                        address TEXT,
                        latitude REAL,
                        longitude REAL,
                        updated_at TEXT NOT NULL
                    );
                    CREATE TABLE sync_lease (
                        account_id TEXT PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
                        job_id TEXT NOT NULL,
                        holder TEXT NOT NULL,
                        expires_at TEXT NOT NULL,
                        updated_at TEXT NOT NULL
                    );
                    CREATE TABLE trello_card_labels (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        trello_card_id TEXT NOT NULL,
                        trello_label_id TEXT NOT NULL,
                        name TEXT,
                        color TEXT,
                        UNIQUE (account_id, trello_card_id, trello_label_id)
                    );
                    CREATE TABLE sync_checklists (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_task_id INTEGER NOT NULL REFERENCES sync_tasks(id) ON DELETE CASCADE,
                        trello_checklist_id TEXT NOT NULL,
                        name TEXT NOT NULL,
                        position REAL NOT NULL DEFAULT 0,
                        UNIQUE (sync_task_id, trello_checklist_id)
                    );
                    CREATE TABLE sync_checklist_items (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        checklist_id INTEGER NOT NULL REFERENCES sync_checklists(id) ON DELETE CASCADE,
                        trello_check_item_id TEXT NOT NULL,
                        name TEXT NOT NULL,
                        completed INTEGER NOT NULL DEFAULT 0,
                        position REAL NOT NULL DEFAULT 0,
                        UNIQUE (checklist_id, trello_check_item_id)
                    );
                    CREATE TABLE trello_card_custom_field_values (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        trello_card_id TEXT NOT NULL,
                        trello_field_id TEXT NOT NULL,
                        id_value TEXT,
                        value TEXT,
                        UNIQUE (account_id, trello_card_id, trello_field_id)
                    );
                    CREATE TABLE background_jobs (
                        id TEXT PRIMARY KEY,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        kind TEXT NOT NULL,
                        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'error')),
                        idempotency_key TEXT,
                        device_id TEXT,
                        processed INTEGER NOT NULL DEFAULT 0,
                        total INTEGER NOT NULL DEFAULT 0,
                        payload TEXT NOT NULL DEFAULT '{}',
                        results TEXT NOT NULL DEFAULT '[]',
                        error TEXT,
                        created_at TEXT NOT NULL,
                        updated_at TEXT NOT NULL,
                        UNIQUE (account_id, idempotency_key)
                    );
                    CREATE INDEX background_jobs_account ON background_jobs(account_id, status);
                    CREATE TABLE potential_duplicates (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_list_id TEXT NOT NULL REFERENCES sync_lists(id) ON DELETE CASCADE,
                        reminder_id TEXT,
                        trello_card_id TEXT NOT NULL,
                        title TEXT NOT NULL,
                        due_date TEXT,
                        job_id TEXT,
                        status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'merged', 'kept_both')),
                        created_at TEXT NOT NULL,
                        resolved_at TEXT
                    );
                    CREATE INDEX potential_duplicates_account ON potential_duplicates(account_id, status);
                    """)
        }
        migrator.registerMigration("v2-superseded-changes") { db in
            // A change folded into a newer one stays (hidden) until the newer one is acked, so an app that acks the
            // older id with a reminder_id still records the card ↔ reminder mapping.
            try db.execute(
                sql: """
                    ALTER TABLE pending_changes ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
                    DROP INDEX pending_changes_account;
                    CREATE INDEX pending_changes_live ON pending_changes(account_id, id) WHERE superseded = 0;
                    """)
        }
        migrator.registerMigration("v3-sync-jobs") { db in
            // A suspected duplicate keeps the reminder's fields, so "keep both" can still create its card.
            // A conflict keeps when each side changed, for lww and the 2-second completion rule on resolution.
            try db.execute(
                sql: """
                    ALTER TABLE potential_duplicates ADD COLUMN fields TEXT NOT NULL DEFAULT '{}';
                    ALTER TABLE conflicts ADD COLUMN job_id TEXT;
                    CREATE INDEX conflicts_card_field ON conflicts(account_id, trello_card_id, field, status);
                    CREATE INDEX potential_duplicates_reminder ON potential_duplicates(account_id, reminder_id, status);
                    CREATE INDEX background_jobs_created ON background_jobs(created_at);
                    """)
        }
        migrator.registerMigration("v4-reconciliation") { db in
            // When each list was last reconciled with Trello (and the last run's error); an account whose Trello
            // token was revoked is flagged instead of failing forever.
            try db.execute(
                sql: """
                    ALTER TABLE sync_lists ADD COLUMN last_reconciled_at TEXT;
                    ALTER TABLE sync_lists ADD COLUMN last_reconcile_error TEXT;
                    ALTER TABLE accounts ADD COLUMN needs_attention TEXT;
                    """)
        }
        migrator.registerMigration("v5-resolution-claims") { db in
            // A resolution claims its row before it writes to Trello, so a double tap applies once.
            try db.execute(
                sql: """
                    ALTER TABLE conflicts ADD COLUMN resolving_at TEXT;
                    ALTER TABLE potential_duplicates ADD COLUMN resolving_at TEXT;
                    """)
        }
        migrator.registerMigration("v6-webhook-callback-tokens") { db in
            // Each account's callback URL carries a token of its own (`WebhookCallback`): 32 random bytes, in hex.
            try db.execute(
                sql: """
                    ALTER TABLE accounts ADD COLUMN webhook_token TEXT;
                    UPDATE accounts SET webhook_token = lower(hex(randomblob(32))) WHERE webhook_token IS NULL;
                    CREATE UNIQUE INDEX accounts_webhook_token ON accounts(webhook_token);
                    """)
        }
        migrator.registerMigration("v7-list-settings") { db in
            // Each list's sync settings (`SyncSettings`, canonical JSON); NULL is the defaults.
            try db.execute(sql: "ALTER TABLE sync_lists ADD COLUMN settings TEXT")
        }
        migrator.registerMigration("v8-activity") { db in
            // Every decision about an item (`NewActivity`), written with the change it describes and kept for a time.
            // It goes with its account (foreign key) and its list (`deleteSyncList`: no foreign key, whose cascade could
            // not use the account-first index). One index, in id
            // order within an account and carrying the filter columns: the worker appends to it (an index by card took
            // a random page per row), and a filtered page reads the account's
            // entries newest first without touching the table until a row matches.
            try db.execute(
                sql: """
                    CREATE TABLE activity (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
                        sync_list_id TEXT,
                        trello_card_id TEXT,
                        reminder_id TEXT,
                        kind TEXT NOT NULL,
                        side TEXT,
                        field TEXT,
                        old_value TEXT,
                        new_value TEXT,
                        rule TEXT,
                        kept TEXT,
                        message TEXT,
                        job_id TEXT,
                        trello_action_id TEXT,
                        created_at TEXT NOT NULL
                    );
                    CREATE INDEX activity_account ON activity(account_id, id, sync_list_id, trello_card_id, reminder_id);
                    """)
        }
        migrator.registerMigration("v9-device-apps") { db in
            // The app a device registered with (its bundle id, the APNs topic); NULL is the server's default app.
            try db.execute(sql: "ALTER TABLE devices ADD COLUMN bundle_id TEXT")
        }
        // (v10 is PostgreSQL's alone: an index SQLite's card index already is.)
        migrator.registerMigration("v11-changes-carry-reminder") { db in
            // A change carries its card's reminder, so the changes page reads it without a lookup per change in
            // sync_tasks (PendingChange.columns). The triggers on sync_tasks keep it equal to the task's, whatever
            // sets, changes or deletes the task's reminder; a change takes the task's reminder as it is written
            // (`insertChange` reads it in its INSERT); one written without naming the column — by a process of the
            // version before, still running while the new one migrates — gets the default '', which the trigger on
            // pending_changes replaces with the task's reminder in the same statement.
            try db.execute(
                sql: """
                    ALTER TABLE pending_changes ADD COLUMN reminder_id TEXT DEFAULT '';
                    UPDATE pending_changes SET reminder_id = (
                        SELECT t.reminder_id FROM sync_tasks t
                        WHERE t.account_id = pending_changes.account_id AND t.trello_card_id = pending_changes.trello_card_id);
                    CREATE TRIGGER sync_tasks_reminder_inserted AFTER INSERT ON sync_tasks WHEN NEW.reminder_id IS NOT NULL BEGIN
                        UPDATE pending_changes SET reminder_id = NEW.reminder_id
                        WHERE account_id = NEW.account_id AND trello_card_id = NEW.trello_card_id;
                    END;
                    CREATE TRIGGER sync_tasks_reminder_updated AFTER UPDATE OF reminder_id ON sync_tasks
                    WHEN OLD.reminder_id IS NOT NEW.reminder_id BEGIN
                        UPDATE pending_changes SET reminder_id = NEW.reminder_id
                        WHERE account_id = NEW.account_id AND trello_card_id = NEW.trello_card_id;
                    END;
                    CREATE TRIGGER sync_tasks_reminder_deleted AFTER DELETE ON sync_tasks WHEN OLD.reminder_id IS NOT NULL BEGIN
                        UPDATE pending_changes SET reminder_id = NULL
                        WHERE account_id = OLD.account_id AND trello_card_id = OLD.trello_card_id;
                    END;
                    CREATE TRIGGER pending_changes_reminder_inserted AFTER INSERT ON pending_changes WHEN NEW.reminder_id = '' BEGIN
                        UPDATE pending_changes SET reminder_id = (
                            SELECT t.reminder_id FROM sync_tasks t
                            WHERE t.account_id = NEW.account_id AND t.trello_card_id = NEW.trello_card_id)
                        WHERE id = NEW.id;
                    END;
                    """)
        }
        migrator.registerMigration("v12-drop-unused-card-tables") { db in
            // Six tables of the seed schema were never read or written: a card's labels, checklists, attachments,
            // location and custom field values live in its change's `fields` (what the apps are sent, and what the
            // export includes) and their hashes in `sync_tasks.field_hashes` (what the worker compares); the board's
            // Priority field in `sync_custom_fields`. Copies in rows of their own would cost every event writes that
            // nothing reads (docs/WEBHOOKS.md, "The path of one webhook").
            try db.execute(
                sql: """
                    DROP TABLE IF EXISTS sync_checklist_items;
                    DROP TABLE IF EXISTS sync_checklists;
                    DROP TABLE IF EXISTS sync_attachments;
                    DROP TABLE IF EXISTS sync_locations;
                    DROP TABLE IF EXISTS trello_card_labels;
                    DROP TABLE IF EXISTS trello_card_custom_field_values;
                    """)
        }
        migrator.registerMigration("v13-several-devices") { db in
            // Which device holds a change, and until when (milliseconds since 1970): `ChangeClaim`. NULL: nobody.
            // Read through pending_changes_live like every pull; no index of their own (a pull filters its account's
            // live rows by them). And the time zone the account's all-day dates are written in (NULL: UTC).
            try db.execute(
                sql: """
                    ALTER TABLE pending_changes ADD COLUMN claimed_by TEXT;
                    ALTER TABLE pending_changes ADD COLUMN claimed_until INTEGER;
                    ALTER TABLE accounts ADD COLUMN time_zone TEXT;
                    """)
        }
        migrator.registerMigration("v14-declined-and-moved-changes") { db in
            // The device that gave a change back (`ChangeFeed.releaseClaims`): not given it again until the hold it
            // gave back (`claimed_until`) lapses, while every other device may take it. The holds by when they lapse,
            // for the worker that wakes the account's devices then (`HoldLapseWaker`): only held rows. And the list a
            // `move` change's card left (`from_sync_list_id`).
            try db.execute(
                sql: """
                    ALTER TABLE pending_changes ADD COLUMN declined_by TEXT;
                    ALTER TABLE pending_changes ADD COLUMN from_sync_list_id TEXT;
                    CREATE INDEX pending_changes_claimed ON pending_changes(claimed_until) WHERE claimed_until IS NOT NULL;
                    """)
        }
        migrator.registerMigration("v15-card-values-and-list-state") { db in
            // A card's values as the server last knew them (`FieldValues`), for the list's cards a new device reads
            // (`GET /dailyroundup/lists/{id}/cards`): one JSON object beside the stamps, set by the writes that stamp
            // fields. NULL for a task written before: its list's next reconciliation reads the card and fills it.
            // And what reconciliation reads of each Trello list: its name (a new one renames the sync list) and whether
            // it is archived (the pairing paused: `SyncListRecord.archivedAt`).
            try db.execute(
                sql: """
                    ALTER TABLE sync_tasks ADD COLUMN field_values TEXT;
                    ALTER TABLE sync_lists ADD COLUMN trello_list_name TEXT;
                    ALTER TABLE sync_lists ADD COLUMN archived_at TEXT;
                    """)
        }
        return migrator
    }
}
