import Foundation
import RoundupCore

// A person renaming, archiving and restoring a list, and the `updateList` webhooks Trello sends for it.

extension FakeTrello {
    /// A person renames a list, or archives or restores it (`closed`): `GET /1/lists/{id}` says so from then on, and the
    /// webhooks watching the list or its board hear `updateList` with `data.old` naming what changed.
    public func userUpdateList(id: String, name: String? = nil, closed: Bool? = nil) {
        perform { $0.updateList(id: id, name: name, closed: closed, member: .user) }
    }
}

extension FakeTrello.State {
    /// The list's name as Trello shows it.
    func listName(_ id: String) -> String { listNames[id] ?? FakeTrello.listName(id) }

    mutating func updateList(id: String, name: String?, closed: Bool?, member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard let boardID = lists[id] else { return .failure(.notFound) }
        var old: [String: JSONValue] = [:]
        if let name, name != listName(id) {
            old["name"] = .string(listName(id))
            listNames[id] = name
        }
        if let closed, closed != closedLists.contains(id) {
            old["closed"] = .bool(!closed)
            if closed { closedLists.insert(id) } else { closedLists.remove(id) }
        }
        var list: [String: JSONValue] = ["id": .string(id), "name": .string(listName(id))]
        if old["closed"] != nil { list["closed"] = .bool(closedLists.contains(id)) }
        guard deliverWebhooks, !old.isEmpty else { return .success(FakeTrello.Write(body: .object(list), deliveries: [])) }
        let date = max(Date(), lastActionDate.addingTimeInterval(0.001))
        lastActionDate = date
        let action = JSONValue.object([
            "id": .string(makeID()), "idMemberCreator": .string(member.id), "memberCreator": member.json, "type": "updateList",
            "date": .string(FakeTrello.timestamp(date)),
            "data": .object(["list": .object(list), "board": boardRef(boardID), "old": .object(old)]), "appCreator": .null, "limits": .null,
        ])
        let hooks = webhooks.values.filter { ($0.idModel == boardID || $0.idModel == id) && !inactiveWebhooks.contains($0.id) }.sorted {
            $0.id < $1.id
        }
        let deliveries = hooks.map { hook in
            let model = hook.idModel == id ? listModel(id) : boardModel(boardID)
            return FakeTrello.Delivery(
                webhookID: hook.id, callbackURL: hook.callbackURL,
                body: Array(JSONValue.object(["action": action, "model": model]).canonicalJSON.utf8), secret: webhookSecret)
        }
        return .success(FakeTrello.Write(body: .object(list), deliveries: deliveries))
    }
}
