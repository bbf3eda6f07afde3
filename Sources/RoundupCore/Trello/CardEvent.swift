import Foundation

/// What one Trello action means for one card, before the store is consulted.
public struct CardEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// The payload carries the new values of these fields.
        case fields([String: JSONValue])
        /// The payload is too thin: fetch the full card and compare every field.
        case fetch
        /// The card left the list: deleted, archived or moved away.
        case removed
        /// Its members changed: nothing the apps see, but a list that filters by member must read the card.
        case membersChanged
    }

    public var cardID: String
    /// The Trello list the event concerns, when the payload names it.
    public var listID: String?
    public var boardID: String?
    public var kind: Kind
    /// For `.fields`: the values before the action, as the payload's `data.old` tells them.
    public var previous: [String: JSONValue] = [:]

    public init(cardID: String, listID: String?, boardID: String?, kind: Kind) {
        self.cardID = cardID
        self.listID = listID
        self.boardID = boardID
        self.kind = kind
    }
}

/// Turns a Trello action into card events. Pure: no store, no network.
public enum CardEventInterpreter {
    /// `updateCard` attributes nothing the apps see depends on: a card dragged within its list is not read again.
    /// (A cover follows an image attachment, whose own action reads the card already.)
    public static let invisibleAttributes: Set<String> = ["pos", "cover", "idAttachmentCover", "manualCoverAttachment"]

    public static func events(for body: TrelloWebhookBody, actionType: String? = nil) -> [CardEvent] {
        let action = body.action
        guard let type = actionType ?? action.type, let data = action.data,
            let cardID = data.card?["id"]?.stringValue
        else { return [] }
        let board = data.board?.id
        // A list model names the list when the payload does not.
        let modelList = body.model?.idBoard != nil ? body.model?.id : nil
        let list = data.list?.id ?? data.listAfter?.id ?? (data.card?["idList"]?.stringValue) ?? modelList

        guard let type = TrelloActionType(rawValue: type) else { return [] }
        switch type {
        case .createCard, .copyCard, .convertToCardFromCheckItem, .moveCardToBoard:
            return [CardEvent(cardID: cardID, listID: list, boardID: board, kind: .fetch)]
        case .moveCardFromBoard:
            // The card is read where it is now: in a synced list of the other board, it moved (one change, whichever
            // board's webhook comes first); anywhere else, it left the list it was in.
            return [CardEvent(cardID: cardID, listID: data.list?.id ?? modelList, boardID: board, kind: .fetch)]
        case .deleteCard:
            return [CardEvent(cardID: cardID, listID: data.list?.id ?? modelList, boardID: board, kind: .removed)]
        case .updateCard:
            let old = data.old ?? [:]
            let card = data.card ?? [:]
            if old["idList"] != nil, data.listBefore?.id != nil, let after = data.listAfter?.id ?? card["idList"]?.stringValue {
                // Moved to another list: the card is read where it is now. The list it left is the one the store has it
                // in, so one read tells a move between synced lists (one change) from a card leaving or arriving.
                return [CardEvent(cardID: cardID, listID: after, boardID: board, kind: .fetch)]
            }
            if old["closed"] != nil {
                let closed = card["closed"]?.boolValue ?? true
                return [CardEvent(cardID: cardID, listID: list, boardID: board, kind: closed ? .removed : .fetch)]
            }
            // An attribute the payload does not carry a mapping for (a location, a due reminder, a cover, anything Trello
            // adds): the card is read, so the edit reaches the apps now, not at the next reconciliation. Only a card's
            // place in its list is nothing the apps see.
            // Members: read only by lists that filter by them, beside what else the payload carries. (A loop, not sets:
            // this runs for every updateCard a worker applies.)
            var members = false
            for key in old.keys where SyncField.fromCardAttribute[key] == nil && !Self.invisibleAttributes.contains(key) {
                guard key == "idMembers" else { return [CardEvent(cardID: cardID, listID: list, boardID: board, kind: .fetch)] }
                members = true
            }
            var events: [CardEvent] = []
            let fields = CardMapper.partialFields(card: card, changedAttributes: old.keys)
            if !fields.isEmpty {
                var event = CardEvent(cardID: cardID, listID: list, boardID: board, kind: .fields(fields))
                event.previous = CardMapper.partialFields(card: old, changedAttributes: old.keys)
                events.append(event)
            }
            if members { events.append(CardEvent(cardID: cardID, listID: list, boardID: board, kind: .membersChanged)) }
            return events  // `pos` alone: nothing the apps see
        case .addMemberToCard, .removeMemberFromCard:
            return [CardEvent(cardID: cardID, listID: data.list?.id ?? modelList, boardID: board, kind: .membersChanged)]
        case .addLabelToCard, .removeLabelFromCard, .addChecklistToCard, .removeChecklistFromCard, .updateChecklist, .createCheckItem,
            .updateCheckItem, .updateCheckItemStateOnCard, .deleteCheckItem, .addAttachmentToCard, .deleteAttachmentFromCard,
            .updateCustomFieldItem:
            // Labels, checklists, check items, attachments, custom fields: the payload names what changed
            // but not the card's resulting value, so read the card.
            return [CardEvent(cardID: cardID, listID: data.list?.id ?? modelList, boardID: board, kind: .fetch)]
        case .updateLabel, .deleteLabel, .updateCustomField, .updateList:
            // A board's label, field or list: no card of its own (the consumer queues the board's lists for reconciliation).
            return []
        }
    }
}
