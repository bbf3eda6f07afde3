import Foundation

/// The action types the server acts on (Trello's names). Anything else is answered 200 and not enqueued; the
/// interpreter (`CardEventInterpreter`) switches over every case.
public enum TrelloActionType: String, Sendable, CaseIterable {
    case createCard, updateCard, deleteCard, copyCard, moveCardToBoard, moveCardFromBoard, convertToCardFromCheckItem
    case addLabelToCard, removeLabelFromCard
    case addChecklistToCard, removeChecklistFromCard, updateChecklist
    case createCheckItem, updateCheckItem, updateCheckItemStateOnCard, deleteCheckItem
    case addAttachmentToCard, deleteAttachmentFromCard, updateCustomFieldItem
    /// Only for lists that filter by member (`CardFilter.members`): the worker drops them for the others.
    case addMemberToCard, removeMemberFromCard
    /// A board label renamed, recoloured or deleted: no card is named; the board's synced lists are reconciled.
    case updateLabel, deleteLabel
    /// A board's custom field edited (an option added to Priority, renamed, reordered): as for a label, the board's
    /// synced lists are reconciled, and reconciliation reads the board's Priority field again.
    case updateCustomField
    /// A list renamed, archived or restored: as for a label, the board's synced lists are reconciled, and
    /// reconciliation reads each Trello list first (a new name renames the sync list; archived, its pairing pauses).
    case updateList

    /// Every case's name (the ingress's filter, one set lookup).
    public static let handled: Set<String> = Set(allCases.map(\.rawValue))

    /// Actions on a board's labels, custom fields or lists: they change the cards carrying the label or option, or the
    /// list, without naming a card; the board's synced lists are reconciled.
    public var changesBoardLabels: Bool { self == .updateLabel || self == .deleteLabel || self == .updateCustomField || self == .updateList }
    public static let boardLabelChanges: Set<String> = Set(allCases.filter(\.changesBoardLabels).map(\.rawValue))
}

/// The little of a webhook body the ingress needs: the action's id and type, and the watched model.
public struct WebhookEnvelope: Decodable, Sendable {
    public struct Action: Decodable, Sendable {
        public var id: String?
        public var type: String?
    }
    public struct Model: Decodable, Sendable {
        public var id: String?
    }
    public var action: Action?
    public var model: Model?
}

/// A reference Trello puts in action data: `{"id", "name"}`.
public struct TrelloRef: Decodable, Sendable, Equatable {
    public var id: String
    public var name: String?
}

/// A card action as the worker reads it.
public struct TrelloAction: Decodable, Sendable, Equatable {
    public struct ActionData: Decodable, Sendable, Equatable {
        public var card: [String: JSONValue]?
        public var old: [String: JSONValue]?
        public var list: TrelloRef?
        public var listBefore: TrelloRef?
        public var listAfter: TrelloRef?
        public var board: TrelloRef?
    }
    public var id: String?
    public var type: String?
    public var date: String?
    public var data: ActionData?
}

/// A full webhook body as the worker reads it. The model is a list (`idBoard` present), a board or a card.
public struct TrelloWebhookBody: Decodable, Sendable, Equatable {
    public struct Model: Decodable, Sendable, Equatable {
        public var id: String?
        public var idBoard: String?
    }
    public var action: TrelloAction
    public var model: Model?
}

extension TrelloWebhookBody {
    /// Decodes a body, or an action object alone (as some captures hold).
    /// Only what `init(json:)` reads is built (`selection`); the rest — `display`, `memberCreator`, the model's
    /// other fields, often most of the body — is checked and skipped.
    public static func decode(_ bytes: some Collection<UInt8>) throws -> TrelloWebhookBody {
        try TrelloWebhookBody(json: JSONParser.parse(bytes, selecting: selection))
    }

    /// The members `init(json:)` reads: a body's `action` and `model`, or an action alone at the root.
    static let selection: JSONSelection = {
        let data = JSONSelection.members([
            "card": .everything, "old": .everything, "list": .everything, "listBefore": .everything, "listAfter": .everything,
            "board": .everything,
        ])
        let action: [String: JSONSelection] = ["id": .everything, "type": .everything, "date": .everything, "data": data]
        return .members(action.merging(["action": .members(action), "model": .members(["id": .everything, "idBoard": .everything])]) { a, _ in a })
    }()

    /// A body, or an action alone, from a parsed document.
    public init(json: JSONValue) throws {
        guard case .object(let root) = json else { throw JSONParser.Error(offset: 0, reason: "a webhook body is a JSON object") }
        if let action = root["action"], case .object = action {
            let model = root["model"].map { Model(id: $0["id"]?.stringValue, idBoard: $0["idBoard"]?.stringValue) }
            self.init(action: TrelloAction(json: action), model: model)
        } else {
            self.init(action: TrelloAction(json: json), model: nil)
        }
    }
}

extension TrelloRef {
    init?(json: JSONValue?) {
        guard let id = json?["id"]?.stringValue else { return nil }
        self.init(id: id, name: json?["name"]?.stringValue)
    }
}

extension TrelloAction {
    init(json: JSONValue) {
        let data = json["data"]
        self.init(
            id: json["id"]?.stringValue, type: json["type"]?.stringValue, date: json["date"]?.stringValue,
            data: data.map {
                ActionData(
                    card: $0["card"]?.objectValue, old: $0["old"]?.objectValue, list: TrelloRef(json: $0["list"]),
                    listBefore: TrelloRef(json: $0["listBefore"]), listAfter: TrelloRef(json: $0["listAfter"]),
                    board: TrelloRef(json: $0["board"]))
            })
    }
}
