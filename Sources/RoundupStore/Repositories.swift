public import Foundation
public import RoundupCore
public import ServiceLifecycle

// The store as callers see it: small repositories, each a seam with two real implementations (SQLiteStore and
// PostgresStore). A caller takes the ones it uses (`any ChangeFeed & ListRepository`, say); the compositions at the
// end name what a whole process needs.

/// Accounts: creation, tokens, credentials and settings, deletion.
public protocol AccountRepository: Sendable {
    func createAccount(authTokenHash: String) async throws -> String
    func accountID(tokenHash: String) async throws -> String?
    func rotateToken(accountID: String, newTokenHash: String) async throws
    func account(id: String) async throws -> AccountRecord?
    func accountDetails(id: String) async throws -> AccountDetails?
    /// Applies `AccountDetails.applying(_:at:)` to the stored account; nil when there is none.
    func updateAccount(id: String, _ update: AccountUpdate) async throws -> AccountDetails?
    /// Deletes the account and everything it owns; returns its lists (for their Trello webhooks) as they were.
    func deleteAccount(id: String) async throws -> [SyncListRecord]
}

extension AccountRepository {
    /// Sets the account's Trello credentials and webhook secret (nil keeps one), by the update rule.
    public func updateAccountCredentials(id: String, apiKey: String?, token: String?, webhookSecret: String?) async throws {
        _ = try await updateAccount(id: id, AccountUpdate(trelloAPIKey: apiKey, trelloToken: token, trelloWebhookSecret: webhookSecret))
    }

    /// How the account's conflicts are resolved and its deleted reminders handled; `missingAccountPolicy` for an
    /// account the store does not have.
    public func conflictPolicy(accountID: String) async throws -> (policy: ConflictPolicy, deleteMode: DeleteMode) {
        guard let account = try await accountDetails(id: accountID) else { return AccountDetails.missingAccountPolicy }
        return (account.conflictPolicy, account.deleteMode)
    }
}

/// The Trello lists an account syncs, their webhooks, and their boards' Priority field.
public protocol ListRepository: Sendable {
    /// Stores a new pairing as made by `SyncListRecord.new` (through `createSyncList`); `StoreError.duplicateList` when the
    /// account pairs that Trello list already.
    func insertSyncList(_ list: SyncListRecord) async throws
    /// Replaces a list's settings; nil when the account has no such list. The next event of the list obeys them.
    func updateSyncListSettings(accountID: String, id: String, settings: SyncSettings) async throws -> SyncListRecord?
    func syncLists(accountID: String) async throws -> [SyncListRecord]
    func syncList(accountID: String, id: String) async throws -> SyncListRecord?
    func setWebhooks(syncListID: String, listWebhookID: String?, boardWebhookID: String?) async throws
    /// Deletes a list with its tasks and pending changes; returns it as it was.
    func deleteSyncList(accountID: String, id: String) async throws -> SyncListRecord?
    func priorityField(accountID: String, boardID: String) async throws -> PriorityField?
    func savePriorityField(accountID: String, boardID: String, field: PriorityField?) async throws
    /// The cards the store has live in the account's list, each with its reminder and values (`FieldValues`), in the
    /// order the store first saw them: those after the card of row `after` (0: from the first), at most `limit`.
    func listCards(accountID: String, syncListID: String, after: Int64, limit: Int) async throws -> [ListCardRecord]
    /// What reconciliation read of the Trello list: its name (`name` too when given: a rename in Trello) and whether it
    /// is archived (`archivedAt`, nil when open). Returns the list as it is now; nil when it is gone.
    func setTrelloListState(
        accountID: String, id: String, name: String?, trelloListName: String, archivedAt: String?
    ) async throws
        -> SyncListRecord?
}

extension ListRepository {
    /// Pairs a Trello list: a new list record (its id and pairing time made here, once for both stores), stored.
    public func createSyncList(
        accountID: String, name: String, trelloBoardID: String, trelloListID: String, settings: SyncSettings = .default,
        trelloListName: String? = nil
    ) async throws -> SyncListRecord {
        let list = SyncListRecord.new(
            accountID: accountID, name: name, trelloBoardID: trelloBoardID, trelloListID: trelloListID, settings: settings,
            trelloListName: trelloListName)
        try await insertSyncList(list)
        return list
    }
}

/// What changed on Trello's side, for the apps: written by the worker, pulled and acknowledged by the apps.
public protocol ChangeFeed: Sendable {
    /// What the worker needs before it fetches and applies a batch, read in one transaction.
    func lookup(_ items: [BatchLookup]) async throws -> BatchContext
    /// Applies observations in one transaction: the pending-change rows written, the accounts that got them (for
    /// their pushes), and how many of each change type.
    @discardableResult
    func apply(_ observations: [CardObservation]) async throws -> AppliedChanges
    /// Gives `sink` the account's pending changes after `afterID`, oldest first, at most `limit`, as the store reads
    /// them (`PendingChangeCells`): the changes page and the stream write each change's JSON from its stored bytes,
    /// with no `String` made per column. `pendingChanges(accountID:afterID:limit:)` keeps them as `PendingChange`s.
    func pendingChanges<Sink: PendingChangeSink>(accountID: String, afterID: Int64, limit: Int, into sink: Sink) async throws -> Sink
    /// `pendingChanges` for one device of the account: gives `sink` the changes after `afterID` (up to
    /// `claim.throughID`) that no other device holds, and hands the ones it took to `claim.deviceID` until
    /// `claim.until`, in one transaction (one statement more per read, none per change). A new change of a card takes
    /// over its folded change's hold. Nil when the device is not one of the account's.
    func claimChanges<Sink: PendingChangeSink>(
        accountID: String, claim: ChangeClaim, afterID: Int64, limit: Int, into sink: Sink
    ) async throws
        -> Sink?
    /// Gives back the device's holds (all, or those of the cards whose changes `ids` names: a change folded into a
    /// newer one passed its hold on to it): the changes go to the next other device that pulls; this device is not
    /// given them again before `declinedUntil` (milliseconds since 1970). Returns how many live changes were given back.
    func releaseClaims(accountID: String, deviceID: String, ids: [Int64]?, declinedUntil: Int64) async throws -> Int
    /// The accounts with a live change whose hold lapsed in (`after`, `through`] (milliseconds since 1970): their
    /// devices are woken then, or a change held by a device that vanished waits for an unrelated push.
    func accountsWithLapsedHolds(after: Int64, through: Int64) async throws -> [String]
    /// The card's newest unacknowledged change, if any.
    func unackedChange(accountID: String, cardID: String) async throws -> PendingChange?
    /// Acks changes, recording reminder ids for creates; all or nothing.
    func acknowledge(accountID: String, acks: [ChangeAck]) async throws -> AckResult
}

/// The devices that get an account's pushes.
public protocol DeviceRepository: Sendable {
    /// Inserts or updates a device; `created` tells which.
    func upsertDevice(
        accountID: String, deviceID: String, apnsToken: String, platform: DevicePlatform, environment: APNsEnvironment, bundleID: BundleID?
    ) async throws -> (DeviceRecord, created: Bool)
    func devices(accountID: String) async throws -> [DeviceRecord]
    func deleteDevice(accountID: String, deviceID: String) async throws -> Bool
    /// Deletes the device only while it still has this token (APNs said the token is gone).
    func deleteDevice(accountID: String, deviceID: String, apnsToken: String) async throws -> Bool
}

extension DeviceRepository {
    /// A device of the server's default app.
    public func upsertDevice(
        accountID: String, deviceID: String, apnsToken: String, platform: DevicePlatform, environment: APNsEnvironment
    ) async throws -> (DeviceRecord, created: Bool) {
        try await upsertDevice(
            accountID: accountID, deviceID: deviceID, apnsToken: apnsToken, platform: platform, environment: environment, bundleID: nil)
    }
}

/// Background jobs and the account's job lease (`JobLease`).
public protocol JobRepository: Sendable {
    /// Creates a job and takes the account's lease in one transaction (or finds the idempotent replay, or the job
    /// that holds the lease). A lease whose job went stale is taken over, and that job is marked stale.
    func submitJob(
        accountID: String, kind: JobKind, deviceID: String?, idempotencyKey: String?, payload: JSONValue, total: Int, staleAfter: TimeInterval
    ) async throws -> JobSubmission
    func job(accountID: String, id: String) async throws -> SyncJob?
    /// A worker picks up a job: checks it is still running and not stale, and takes over the lease.
    func startJob(id: String, holder: String, staleAfter: TimeInterval) async throws -> JobStart
    /// Advances the heartbeat; false when the job is no longer running (it was given up as stale).
    func heartbeat(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool
    /// Stores one item's result and advances `processed` (and the heartbeat); false when the job was given up as stale.
    func recordResult(jobID: String, holder: String, index: Int, result: SyncItemResult, total: Int?, staleAfter: TimeInterval) async throws -> Bool
    /// Gives a running job's turn back (`JobLease.yield`): queued again, resumed from `processed` by whichever worker
    /// starts it next; false when it is no longer this holder's.
    func yieldJob(jobID: String, holder: String, staleAfter: TimeInterval) async throws -> Bool
    /// Ends the job (completed or error) and releases the lease.
    func finishJob(jobID: String, status: JobStatus, error: String?) async throws
}

/// What the store knows of each card: its stamps and its reminder, and what an outbound write changes.
public protocol CardStateRepository: Sendable {
    func task(accountID: String, cardID: String) async throws -> SyncTaskRecord?
    /// Every card row that names the reminder, the most recently updated first (`task(accountID:reminderID:)` picks one).
    func tasks(accountID: String, reminderID: String) async throws -> [SyncTaskRecord]
    /// Card ids of the list that a reminder maps to.
    func mappedCardIDs(accountID: String, syncListID: String) async throws -> Set<String>
    /// Records that a create is about to be sent to Trello for this reminder.
    func reserveCreate(accountID: String, syncListID: String, reminderID: String) async throws
    /// A create that Trello certainly did not perform: its placeholder goes.
    func releaseCreate(accountID: String, reminderID: String) async throws
    /// Applies an outbound write's consequences; returns the ids of the conflicts it stored.
    func recordSyncWrite(_ write: SyncWrite) async throws -> [Int64]
    /// Emits a `create` change for each card (mapping it to no reminder yet); returns how many were written.
    func importCards(accountID: String, syncListID: String, cards: [(cardID: String, fields: [String: JSONValue])]) async throws -> Int
}

extension CardStateRepository {
    /// The card a reminder maps to, by `SyncTaskRecord.mapping(among:)`.
    public func task(accountID: String, reminderID: String) async throws -> SyncTaskRecord? {
        SyncTaskRecord.mapping(among: try await tasks(accountID: accountID, reminderID: reminderID))
    }
}

/// Conflicts and possible duplicates, and their resolution by the user.
public protocol ResolutionRepository: Sendable {
    func conflicts(accountID: String) async throws -> [ConflictRecord]
    func conflict(accountID: String, id: Int64) async throws -> ConflictDetail?
    func resolveConflict(accountID: String, id: Int64, resolution: ConflictChoice) async throws -> Bool
    func duplicates(accountID: String) async throws -> [DuplicateRecord]
    func addDuplicate(accountID: String, _ duplicate: NewDuplicate) async throws -> Int64
    func duplicate(accountID: String, id: Int64) async throws -> DuplicateDetail?
    func resolveDuplicate(accountID: String, id: Int64, status: DuplicateStatus) async throws -> Bool
    /// Claims an open conflict or duplicate for one resolution at a time; false when it is resolved or claimed.
    func claimResolution(accountID: String, table: ResolutionTable, id: Int64) async throws -> Bool
    func releaseResolution(accountID: String, table: ResolutionTable, id: Int64) async throws
}

/// The store itself: its schema, its health, and the routing the ingress reads from Redis.
public protocol StoreMaintenance: Sendable {
    /// What must run for the store to answer, as a service for the process's ServiceGroup (PostgreSQL's connection
    /// pool); nil when nothing must (SQLite).
    var service: (any Service)? { get }
    func migrate() async throws
    /// A cheap query, for readiness checks.
    func ping() async throws
    /// Secrets, callback tokens and model routes of every account, for publishing to Redis.
    func routingSnapshot() async throws -> RoutingSnapshot
}

/// What the API and the ingress-facing side use.
public typealias SyncStore = AccountRepository & ListRepository & ChangeFeed & DeviceRepository & StoreMaintenance
/// The outbound side: jobs, card state, resolutions.
public typealias SyncJobStore = JobRepository & CardStateRepository & ResolutionRepository

/// What reconciliation and webhook health need from the store.
public protocol ReconcileStore: Sendable {
    /// Every synced list of every account, with whether its account needs its user (then it is not reconciled).
    func allSyncLists() async throws -> [(list: SyncListRecord, needsAttention: Bool)]
    /// Records a run: its time when it succeeded, its error either way (nil clears it).
    func markReconciled(syncListID: String, succeeded: Bool, error: String?) async throws
    /// Flags (or clears) the account; with `whileToken`, only if that is still its Trello token. Returns whether it changed.
    @discardableResult
    func setNeedsAttention(accountID: String, reason: AttentionReason?, whileToken: String?) async throws -> Bool
    /// Cards the store holds as present in the list.
    func liveCardIDs(accountID: String, syncListID: String) async throws -> [String]
    /// A webhook was registered again: every list of the account that named the old one names the new one.
    func replaceWebhook(accountID: String, old: String?, new: String, board: Bool, syncListID: String) async throws
}

/// What operators read, on either back end.
public protocol OperatorStore: Sendable {
    func allAccounts() async throws -> [(details: AccountDetails, lists: Int, pendingChanges: Int)]
    func jobs(limit: Int, id: String?) async throws -> [JobRecord]
    func allPendingChanges() async throws -> [PendingChange]
    func tableNames() async throws -> [String]
}

/// Everything a process may need of the store.
public typealias ServerStore = SyncStore & SyncJobStore & ReconcileStore & OperatorStore & ActivityRepository
