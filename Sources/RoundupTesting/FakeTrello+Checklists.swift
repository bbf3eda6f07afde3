import Foundation
import NIOConcurrencyHelpers
import RoundupCore

// Checklists and check items (REST and a person's edits), board labels, and the webhooks Trello sends for them.

extension FakeTrello {
    /// Gives a board these labels (id, name, color), replacing any it had; cards carrying one show its name and colour.
    public func setBoardLabels(boardID: String, _ labels: [(id: String, name: String, color: String?)]) {
        state.withLockedValue { state in
            state.boardLabels[boardID] = labels.map {
                .object([
                    "id": .string($0.id), "idBoard": .string(boardID), "name": .string($0.name), "color": $0.color.map(JSONValue.string) ?? .null,
                ])
            }
        }
    }

    /// A person renames or recolours a board label: the cards carrying it show the new one, and the board's webhooks
    /// hear `updateLabel` (no card is named; list webhooks hear nothing, as in Trello).
    public func userUpdateLabel(boardID: String, labelID: String, name: String, color: String?) {
        perform { $0.updateLabel(boardID: boardID, labelID: labelID, name: name, color: color, member: .user) }
    }

    /// A person adds a checklist with items (names; all unticked) to a card. Returns the checklist's id and its items' ids.
    @discardableResult
    public func userAddChecklist(cardID: String, name: String, items: [String]) -> (id: String, items: [String]) {
        guard case .success(let write) = perform({ $0.createChecklist(cardID: cardID, ["name": .string(name)], member: .user) }),
            let id = write.body["id"]?.stringValue
        else { return ("", []) }
        var ids: [String] = []
        for item in items {
            if case .success(let added) = perform({ $0.addCheckItem(checklistID: id, ["name": .string(item)], member: .user) }),
                let itemID = added.body["id"]?.stringValue
            {
                ids.append(itemID)
            }
        }
        return (id, ids)
    }

    /// A person attaches a link, or uploads a file (`upload`, with its MIME type), to a card. Returns the attachment's id.
    @discardableResult
    public func userAddAttachment(cardID: String, url: String, name: String, upload: Bool = false, mimeType: String? = nil) -> String {
        var params: [String: JSONValue] = ["url": .string(url), "name": .string(name)]
        if upload {
            params["isUpload"] = true
            params["mimeType"] = mimeType.map(JSONValue.string) ?? .null
        }
        guard case .success(let write) = perform({ $0.addAttachment(cardID: cardID, params, member: .user) }) else { return "" }
        return write.body["id"]?.stringValue ?? ""
    }

    /// A person ticks or unticks a check item (`updateCheckItemStateOnCard`).
    public func userSetCheckItem(cardID: String, itemID: String, completed: Bool) {
        perform { $0.updateCheckItem(cardID: cardID, itemID: itemID, ["state": .string(completed ? "complete" : "incomplete")], member: .user) }
    }

    /// A person renames a checklist (`updateChecklist`).
    public func userRenameChecklist(checklistID: String, name: String) {
        perform { $0.renameChecklist(id: checklistID, ["name": .string(name)], member: .user) }
    }

    /// A person renames a check item (`updateCheckItem`).
    public func userRenameCheckItem(cardID: String, itemID: String, name: String) {
        perform { $0.updateCheckItem(cardID: cardID, itemID: itemID, ["name": .string(name)], member: .user) }
    }
}

extension FakeTrello.State {
    /// The card holding a checklist, and the checklist's index in it.
    func checklist(_ id: String) -> (cardID: String, index: Int)? {
        for (cardID, card) in cards {
            if let index = (card["checklists"]?.arrayValue ?? []).firstIndex(where: { $0["id"]?.stringValue == id }) { return (cardID, index) }
        }
        return nil
    }

    /// `POST /1/cards/{id}/checklists` with `name`: a new checklist at the bottom (`addChecklistToCard`).
    mutating func createChecklist(
        cardID: String, _ params: [String: JSONValue], member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        guard let name = params["name"]?.stringValue, !name.isEmpty else { return .failure(.invalid("name")) }
        var lists = card["checklists"]?.arrayValue ?? []
        let id = makeID()
        let checklist = JSONValue.object([
            "id": .string(id), "name": .string(name), "idCard": .string(cardID), "idBoard": card["idBoard"] ?? .null,
            "pos": .number(Double(lists.count + 1) * 16384), "checkItems": .array([]),
        ])
        lists.append(checklist)
        return save(
            card: &card, cardID: cardID, checklists: lists, body: checklist, type: "addChecklistToCard",
            data: ["checklist": .object(["id": .string(id), "name": .string(name)])], member: member)
    }

    /// `PUT /1/checklists/{id}` with `name` (`updateChecklist`).
    mutating func renameChecklist(
        id: String, _ params: [String: JSONValue], member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard let (cardID, index) = checklist(id), var card = cards[cardID] else { return .failure(.notFound) }
        guard let name = params["name"]?.stringValue, !name.isEmpty else { return .failure(.invalid("name")) }
        var lists = card["checklists"]?.arrayValue ?? []
        guard case .object(var checklist) = lists[index] else { return .failure(.notFound) }
        let old = checklist["name"] ?? .null
        guard old != .string(name) else { return .success(FakeTrello.Write(body: .object(checklist), deliveries: [])) }
        checklist["name"] = .string(name)
        lists[index] = .object(checklist)
        return save(
            card: &card, cardID: cardID, checklists: lists, body: .object(checklist), type: "updateChecklist",
            data: ["checklist": .object(["id": .string(id), "name": .string(name)]), "old": .object(["name": old])], member: member)
    }

    /// `DELETE /1/checklists/{id}` (`removeChecklistFromCard`).
    mutating func deleteChecklist(id: String, member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard let (cardID, index) = checklist(id), var card = cards[cardID] else { return .failure(.notFound) }
        var lists = card["checklists"]?.arrayValue ?? []
        let removed = lists.remove(at: index)
        return save(
            card: &card, cardID: cardID, checklists: lists, body: .object(["limits": .object([:])]), type: "removeChecklistFromCard",
            data: ["checklist": .object(["id": .string(id), "name": removed["name"] ?? .null])], member: member)
    }

    /// `POST /1/checklists/{id}/checkItems` with `name` and `checked`: a new item at the bottom (`createCheckItem`).
    mutating func addCheckItem(
        checklistID: String, _ params: [String: JSONValue], member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard let (cardID, index) = checklist(checklistID), var card = cards[cardID] else { return .failure(.notFound) }
        guard let name = params["name"]?.stringValue, !name.isEmpty else { return .failure(.invalid("name")) }
        let checked = params["checked"] == .bool(true) || params["checked"] == .string("true")
        var lists = card["checklists"]?.arrayValue ?? []
        guard case .object(var checklist) = lists[index] else { return .failure(.notFound) }
        var items = checklist["checkItems"]?.arrayValue ?? []
        let top = items.compactMap { FakeTrello.number($0["pos"]) }.max() ?? 0
        let item = JSONValue.object([
            "id": .string(makeID()), "name": .string(name), "state": .string(checked ? "complete" : "incomplete"),
            "idChecklist": .string(checklistID), "pos": .number(top + 16384),
        ])
        items.append(item)
        checklist["checkItems"] = .array(items)
        lists[index] = .object(checklist)
        return save(
            card: &card, cardID: cardID, checklists: lists, body: item, type: "createCheckItem",
            data: ["checklist": .object(["id": .string(checklistID), "name": checklist["name"] ?? .null]), "checkItem": item], member: member)
    }

    /// `PUT /1/cards/{card}/checkItem/{item}` with `name` and/or `state` (complete, incomplete):
    /// `updateCheckItemStateOnCard` for a tick, `updateCheckItem` for a rename.
    mutating func updateCheckItem(
        cardID: String, itemID: String, _ params: [String: JSONValue], member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        var lists = card["checklists"]?.arrayValue ?? []
        for index in lists.indices {
            guard case .object(var checklist) = lists[index] else { continue }
            var items = checklist["checkItems"]?.arrayValue ?? []
            guard let at = items.firstIndex(where: { $0["id"]?.stringValue == itemID }), case .object(var item) = items[at] else { continue }
            var old: [String: JSONValue] = [:]
            if let state = params["state"]?.stringValue {
                guard state == "complete" || state == "incomplete" else { return .failure(.invalid("state")) }
                if item["state"] != .string(state) {
                    old["state"] = item["state"] ?? .null
                    item["state"] = .string(state)
                }
            }
            if let name = params["name"]?.stringValue {
                guard !name.isEmpty else { return .failure(.invalid("name")) }
                if item["name"] != .string(name) {
                    old["name"] = item["name"] ?? .null
                    item["name"] = .string(name)
                }
            }
            guard !old.isEmpty else { return .success(FakeTrello.Write(body: .object(item), deliveries: [])) }
            items[at] = .object(item)
            checklist["checkItems"] = .array(items)
            lists[index] = .object(checklist)
            return save(
                card: &card, cardID: cardID, checklists: lists, body: .object(item),
                type: old["name"] == nil ? "updateCheckItemStateOnCard" : "updateCheckItem",
                data: [
                    "checklist": .object(["id": checklist["id"] ?? .null, "name": checklist["name"] ?? .null]), "checkItem": .object(item),
                    "old": .object(old),
                ], member: member)
        }
        return .failure(.notFound)
    }

    /// `DELETE /1/cards/{card}/checkItem/{item}` (`deleteCheckItem`).
    mutating func deleteCheckItem(cardID: String, itemID: String, member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        var lists = card["checklists"]?.arrayValue ?? []
        for index in lists.indices {
            guard case .object(var checklist) = lists[index] else { continue }
            var items = checklist["checkItems"]?.arrayValue ?? []
            guard let at = items.firstIndex(where: { $0["id"]?.stringValue == itemID }) else { continue }
            let removed = items.remove(at: at)
            checklist["checkItems"] = .array(items)
            lists[index] = .object(checklist)
            return save(
                card: &card, cardID: cardID, checklists: lists, body: .object(["limits": .object([:])]), type: "deleteCheckItem",
                data: ["checklist": .object(["id": checklist["id"] ?? .null, "name": checklist["name"] ?? .null]), "checkItem": removed],
                member: member)
        }
        return .failure(.notFound)
    }

    /// Stores the card with its new checklists and announces the action.
    private mutating func save(
        card: inout [String: JSONValue], cardID: String, checklists: [JSONValue], body: JSONValue, type: String, data: [String: JSONValue],
        member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        card["checklists"] = .array(checklists)
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[cardID] = card
        let listID = card["idList"]?.stringValue ?? ""
        var payload = data
        payload["list"] = listRef(listID)
        let deliveries = announce(type, card: card, data: payload, lists: [listID], member: member)
        return .success(FakeTrello.Write(body: body, deliveries: deliveries))
    }

    /// A board label renamed or recoloured: stored, shown on the cards carrying it, announced to the board's webhooks.
    mutating func updateLabel(
        boardID: String, labelID: String, name: String, color: String?, member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var labels = boardLabels[boardID], let index = labels.firstIndex(where: { $0["id"]?.stringValue == labelID }) else {
            return .failure(.notFound)
        }
        let old = labels[index]
        let label = JSONValue.object([
            "id": .string(labelID), "idBoard": .string(boardID), "name": .string(name), "color": color.map(JSONValue.string) ?? .null,
        ])
        labels[index] = label
        boardLabels[boardID] = labels
        for (cardID, card) in cards where card["idBoard"]?.stringValue == boardID {
            guard var carried = card["labels"]?.arrayValue, carried.contains(where: { $0["id"]?.stringValue == labelID }) else { continue }
            carried = carried.map { $0["id"]?.stringValue == labelID ? label : $0 }
            cards[cardID]?["labels"] = .array(carried)
        }
        guard deliverWebhooks else { return .success(FakeTrello.Write(body: label, deliveries: [])) }
        let date = max(Date(), lastActionDate.addingTimeInterval(0.001))
        lastActionDate = date
        let action = JSONValue.object([
            "id": .string(makeID()), "idMemberCreator": .string(member.id), "memberCreator": member.json, "type": "updateLabel",
            "date": .string(FakeTrello.timestamp(date)),
            "data": .object([
                "label": label, "board": boardRef(boardID),
                "old": .object(old["name"] != .string(name) ? ["name": old["name"] ?? .null] : ["color": old["color"] ?? .null]),
            ]),
            "appCreator": .null, "limits": .null,
        ])
        let deliveries = webhooks.values.filter { $0.idModel == boardID && !inactiveWebhooks.contains($0.id) }.sorted { $0.id < $1.id }.map { hook in
            FakeTrello.Delivery(
                webhookID: hook.id, callbackURL: hook.callbackURL,
                body: Array(JSONValue.object(["action": action, "model": boardModel(boardID)]).canonicalJSON.utf8), secret: webhookSecret)
        }
        return .success(FakeTrello.Write(body: label, deliveries: deliveries))
    }
}
