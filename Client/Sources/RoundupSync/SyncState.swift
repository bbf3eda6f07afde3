import Foundation
public import RoundupClient

/// What the engine keeps between launches: save it whenever the engine hands a new one (the `saveState` it was made
/// with, and `RoundupSyncEngine.Event.stateUpdate`), and give the last one saved to the engine at the next launch.
///
/// Small: one entry per reminder the engine has synced (its card and its values as last synced, for the three-way
/// comparison that finds the person's edits), plus the work in flight — the changes applied but not yet acknowledged,
/// and the one batch of edits posted but not yet answered. No history.
public struct SyncState: Sendable, Hashable, Codable {
    /// The version of this shape; a state of a newer version is refused (`SyncStateError`), an older one read.
    public var version: Int = SyncState.currentVersion
    public static let currentVersion = 1

    /// Each reminder the engine has synced, by its id.
    public var reminders: [String: SyncedReminder] = [:]
    /// Changes from the server already applied to the store, not yet acknowledged: acknowledged first at the next
    /// fetch (a crash after applying a change never applies it twice). The value is the reminder the change made or
    /// changed (nil for a delete).
    public var appliedChanges: [Int: AppliedChange] = [:]
    /// The creates the engine is making in the store (a page's): recorded before the store is asked, so a crash
    /// before the state knows a new reminder's id finds it again (an unmapped reminder of the list with these values)
    /// rather than making a second one.
    public var creating: [PendingCreate] = []
    /// The batch of the person's edits posted to the server and not yet answered: posted again with the same key after
    /// a crash, so the server starts no second job (and makes no second card).
    public var outbound: OutboundBatch?

    /// Values of a reminder the server refused (`error`), skipped or took for a possible duplicate: not sent again
    /// until the reminder changes again (or its list is restored from Trello's archive). Without it, every EventKit
    /// notification would post the same refused edit again.
    public var held: [String: ReminderValues] = [:]

    /// Each synced list as last read (`RoundupSyncEngine.refreshLists`): a rename or an archive in Trello since is an
    /// event.
    public var lists: [String: ListSeen] = [:]

    /// Changes for a reminder this device does not have, given back to the person's other devices: since when. One that
    /// no device applies within `RoundupSyncEngine.deferralLimit` (no device has the reminder) is acknowledged.
    public var deferredSince: [Int: Date] = [:]

    public init() {}

    private enum CodingKeys: String, CodingKey {
        case version, reminders, appliedChanges, creating, outbound, held, lists, deferredSince
    }

    // A member a newer engine added reads as empty from a state an older one saved.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        version = try c.decode(Int.self, forKey: .version)
        reminders = try c.decodeIfPresent([String: SyncedReminder].self, forKey: .reminders) ?? [:]
        appliedChanges = try c.decodeIfPresent([Int: AppliedChange].self, forKey: .appliedChanges) ?? [:]
        creating = try c.decodeIfPresent([PendingCreate].self, forKey: .creating) ?? []
        outbound = try c.decodeIfPresent(OutboundBatch.self, forKey: .outbound)
        held = try c.decodeIfPresent([String: ReminderValues].self, forKey: .held) ?? [:]
        lists = try c.decodeIfPresent([String: ListSeen].self, forKey: .lists) ?? [:]
        deferredSince = try c.decodeIfPresent([Int: Date].self, forKey: .deferredSince) ?? [:]
    }

    public struct ListSeen: Sendable, Hashable, Codable {
        public var name: String
        /// Archived in Trello: its pairing is paused; the person's edits of its reminders wait until it is restored.
        public var archived: Bool
    }

    public struct SyncedReminder: Sendable, Hashable, Codable {
        /// The card (nil while its create waits for the server's answer).
        public var cardID: String?
        public var listID: String
        /// The values as last synced, either way.
        public var values: ReminderValues
    }

    public struct AppliedChange: Sendable, Hashable, Codable {
        public var reminderID: String?
        /// Whether the change was a create (its acknowledgement names the reminder made).
        public var created: Bool
    }

    public struct PendingCreate: Sendable, Hashable, Codable {
        public var changeID: Int
        public var cardID: String
        public var listID: String
        public var values: ReminderValues
    }

    public struct OutboundBatch: Sendable, Hashable, Codable {
        public var idempotencyKey: String
        public var changes: [SyncChange]
        /// The values each reminder had when the batch was made: what the state records as synced once it is `ok`.
        public var sentValues: [String: ReminderValues]
        public var jobID: String?
    }
}

/// A saved state the engine cannot use.
public struct SyncStateError: Error, Sendable, CustomStringConvertible {
    public var description: String
}
