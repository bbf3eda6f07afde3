public import RoundupCore

/// A pending change as the store is reading it: its text columns lent as UTF-8 (`UTF8Cell`), valid only during the
/// `PendingChangeSink.take` call that receives it. The changes page and the stream write a change's JSON straight from
/// these; `PendingChange` is made from them where a change is kept.
public struct PendingChangeCells {
    public var id: Int64
    public var changeType: ChangeType
    public var syncListID: UTF8Cell
    public var changedFieldsJSON: UTF8Cell
    public var fieldsJSON: UTF8Cell
    public var trelloCardID: UTF8Cell
    public var trelloActionID: UTF8Cell?
    public var reminderID: UTF8Cell?
    public var createdAt: UTF8Cell
    /// The list a `move` left (a move is stored as an update with it: `ChangeType.storedName`).
    public var fromSyncListID: UTF8Cell?
}

extension PendingChangeCells {
    /// A row of `PendingChange.columns`: its id (column 0) as the backend read it, its text cells lent by `text` (nil for
    /// NULL), each backend its own way. Which columns may be NULL is decided here, once for both.
    package init(id: Int64, text: (Int) -> UTF8Cell?) throws {
        func required(_ column: Int) throws -> UTF8Cell {
            guard let cell = text(column) else { throw UnknownStoredValue.unexpected("text", "NULL in column \(column)") }
            return cell
        }
        let from = text(9)
        let type = try ChangeType.stored(required(2))
        self.init(
            id: id, changeType: from != nil && type == .update ? .move : type, syncListID: try required(1), changedFieldsJSON: try required(3),
            fieldsJSON: try required(4), trelloCardID: try required(5), trelloActionID: text(6), reminderID: text(7), createdAt: try required(8),
            fromSyncListID: from)
    }
}

/// What receives pending changes as a store reads them, in id order (`ChangeFeed.pendingChanges(…, into:)`).
public protocol PendingChangeSink: Sendable {
    /// One change; its cells are valid only during the call.
    mutating func take(_ change: PendingChangeCells)
    /// True once the sink takes nothing more (a page at its byte bound): the store stops reading, or at least stops
    /// making cells of the rows still arriving.
    var isFull: Bool { get }
    /// The id of the last change it took (0: none): a claiming read hands the device the changes up to it.
    var lastTaken: Int64 { get }
}

extension PendingChangeSink {
    public var isFull: Bool { false }
}

extension PendingChange {
    /// A change kept: its cells made into `String`s.
    package init(_ cells: PendingChangeCells, accountID: String) {
        self.init(
            id: cells.id, accountID: accountID, syncListID: cells.syncListID.string, changeType: cells.changeType,
            changedFieldsJSON: cells.changedFieldsJSON.string, fieldsJSON: cells.fieldsJSON.string, trelloCardID: cells.trelloCardID.string,
            trelloActionID: cells.trelloActionID?.string, reminderID: cells.reminderID?.string, createdAt: cells.createdAt.string,
            fromSyncListID: cells.fromSyncListID?.string)
    }
}

/// Keeps the changes it is given, as `PendingChange`s.
package struct PendingChangeList: PendingChangeSink {
    package let accountID: String
    package var changes: [PendingChange] = []

    package init(accountID: String, changes: [PendingChange] = []) {
        self.accountID = accountID
        self.changes = changes
    }

    package mutating func take(_ change: PendingChangeCells) {
        changes.append(PendingChange(change, accountID: accountID))
    }

    package var lastTaken: Int64 { changes.last?.id ?? 0 }
}

extension ChangeType {
    /// The change type a `change_type` column holds, compared as bytes.
    package static func stored(_ cell: UTF8Cell) throws -> ChangeType {
        for (type, text) in storedTexts where cell.equals(text) { return type }
        throw UnknownStoredValue(type: "ChangeType", value: cell.string)
    }

    /// Each type with its raw value as static bytes: comparing a cell with these costs a few instructions a byte,
    /// where `rawValue.utf8` compared through `Sequence.elementsEqual` cost ~400 a change.
    package static let storedTexts: [(ChangeType, StaticString)] = [
        (.update, "update"), (.create, "create"), (.complete, "complete"), (.delete, "delete"),
    ]
}

extension ChangeFeed {
    /// The account's pending changes after `afterID`, oldest first, at most `limit`, each kept as a `PendingChange`.
    public func pendingChanges(accountID: String, afterID: Int64, limit: Int) async throws -> [PendingChange] {
        try await pendingChanges(accountID: accountID, afterID: afterID, limit: limit, into: PendingChangeList(accountID: accountID)).changes
    }

    /// `claimChanges` kept as `PendingChange`s; nil when the device is not the account's.
    public func claimChanges(accountID: String, claim: ChangeClaim, afterID: Int64 = 0, limit: Int) async throws -> [PendingChange]? {
        try await claimChanges(accountID: accountID, claim: claim, afterID: afterID, limit: limit, into: PendingChangeList(accountID: accountID))?
            .changes
    }
}
