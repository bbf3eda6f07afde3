import Foundation

/// The action types the server acts on (Trello's names). Anything else is answered 200 and not enqueued; the
/// interpreter (`CardEventInterpreter`) switches over every case.
package enum TrelloActionType: String, Sendable, CaseIterable {
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
    package static let handled: Set<String> = Set(allCases.map(\.rawValue))

    /// Actions on a board's labels, custom fields or lists: they change the cards carrying the label or option, or the
    /// list, without naming a card; the board's synced lists are reconciled.
    package var changesBoardLabels: Bool { self == .updateLabel || self == .deleteLabel || self == .updateCustomField || self == .updateList }
    package static let boardLabelChanges: Set<String> = Set(allCases.filter(\.changesBoardLabels).map(\.rawValue))
}

/// The little of a webhook body the ingress needs: the action's id and type, and the watched model.
package struct WebhookEnvelope: Decodable, Sendable {
    package struct Action: Decodable, Sendable {
        package var id: String?
        package var type: String?
    }
    package struct Model: Decodable, Sendable {
        package var id: String?
    }
    package var action: Action?
    package var model: Model?
}

/// A reference Trello puts in action data: `{"id", "name"}`.
package struct TrelloRef: Decodable, Sendable, Equatable {
    package var id: String
    package var name: String?
}

/// A card action as the worker reads it.
package struct TrelloAction: Decodable, Sendable, Equatable {
    package struct ActionData: Decodable, Sendable, Equatable {
        package var card: [String: JSONValue]?
        package var old: [String: JSONValue]?
        package var list: TrelloRef?
        package var listBefore: TrelloRef?
        package var listAfter: TrelloRef?
        package var board: TrelloRef?
    }
    package var id: String?
    package var type: String?
    package var date: String?
    package var data: ActionData?
}

/// A full webhook body as the worker reads it. The model is a list (`idBoard` present), a board or a card.
package struct TrelloWebhookBody: Decodable, Sendable, Equatable {
    package struct Model: Decodable, Sendable, Equatable {
        package var id: String?
        package var idBoard: String?
    }
    package var action: TrelloAction
    package var model: Model?
}

extension TrelloWebhookBody {
    /// Decodes a body, or an action object alone (as some captures hold).
    /// Only what `init(json:)` reads is built (`selection`); the rest — `display`, `memberCreator`, the model's
    /// other fields, often most of the body — is checked and skipped.
    package static func decode(_ bytes: some Collection<UInt8>) throws -> TrelloWebhookBody {
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
    package init(json: JSONValue) throws {
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
