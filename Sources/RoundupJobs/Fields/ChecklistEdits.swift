public import RoundupCore

/// A card's checklists as the apps see them (`CardMapper`), and the edits that take them where an app asks.
public struct Checklists: Sendable, Equatable {
    public struct Item: Sendable, Equatable {
        public var id: String
        public var name: String
        public var completed: Bool
    }
    public struct Checklist: Sendable, Equatable {
        public var id: String
        public var name: String
        public var items: [Item]
    }

    /// A checklist an edit names: one the card has, or the one the `n`-th `create` of the same plan makes.
    public enum Ref: Sendable, Equatable {
        case id(String)
        case created(Int)
    }

    public enum Edit: Sendable, Equatable {
        /// A new checklist at the bottom of the card (its items follow as `addItem`s naming `.created(n)`).
        case create(name: String)
        case rename(checklistID: String, name: String)
        case delete(checklistID: String)
        /// A new item at the bottom of a checklist.
        case addItem(Ref, name: String, completed: Bool)
        /// Renames and/or ticks an item (nil: unchanged).
        case updateItem(checklistID: String, itemID: String, name: String?, completed: Bool?)
        case deleteItem(checklistID: String, itemID: String)
    }

    public var lists: [Checklist]

    /// From the `checklists` field's value (`CardMapper`'s form).
    public init(_ value: JSONValue) {
        lists = (value.arrayValue ?? []).compactMap { list in
            guard let id = list["id"]?.stringValue else { return nil }
            let items = (list["items"]?.arrayValue ?? []).compactMap { item -> Item? in
                guard let itemID = item["id"]?.stringValue else { return nil }
                return Item(id: itemID, name: item["name"]?.stringValue ?? "", completed: item["completed"]?.boolValue ?? false)
            }
            return Checklist(id: id, name: list["name"]?.stringValue ?? "", items: items)
        }
    }

    /// The field's value, in `CardMapper`'s form.
    public var value: JSONValue {
        .array(
            lists.map { list in
                .object([
                    "id": .string(list.id), "name": .string(list.name),
                    "items": .array(
                        list.items.map { .object(["id": .string($0.id), "name": .string($0.name), "completed": .bool($0.completed)]) }),
                ])
            })
    }

    /// The edits that apply `wanted` (an app's value, as `CardValues.checklists` leaves it) to these checklists. What
    /// `wanted` leaves out is kept; an id these checklists lack was deleted in Trello and stays deleted; nothing is
    /// deleted but what says `"deleted": true`.
    public func edits(to wanted: JSONValue) -> [Edit] {
        var edits: [Edit] = []
        var created = 0
        for entry in wanted.arrayValue ?? [] {
            if let id = entry["id"]?.stringValue {
                guard let list = lists.first(where: { $0.id == id }) else { continue }  // deleted in Trello
                if entry["deleted"]?.boolValue == true {
                    edits.append(.delete(checklistID: id))
                    continue
                }
                if let name = entry["name"]?.stringValue, name != list.name { edits.append(.rename(checklistID: id, name: name)) }
                for item in entry["items"]?.arrayValue ?? [] {
                    guard let itemID = item["id"]?.stringValue else {
                        edits.append(.addItem(.id(id), name: item["name"]?.stringValue ?? "", completed: item["completed"]?.boolValue ?? false))
                        continue
                    }
                    guard let current = list.items.first(where: { $0.id == itemID }) else { continue }  // deleted in Trello
                    if item["deleted"]?.boolValue == true {
                        edits.append(.deleteItem(checklistID: id, itemID: itemID))
                        continue
                    }
                    let name = item["name"]?.stringValue.flatMap { $0 == current.name ? nil : $0 }
                    let completed = item["completed"]?.boolValue.flatMap { $0 == current.completed ? nil : $0 }
                    if name != nil || completed != nil {
                        edits.append(.updateItem(checklistID: id, itemID: itemID, name: name, completed: completed))
                    }
                }
            } else {
                edits.append(.create(name: entry["name"]?.stringValue ?? ""))
                for item in entry["items"]?.arrayValue ?? [] where item["deleted"]?.boolValue != true {
                    edits.append(.addItem(.created(created), name: item["name"]?.stringValue ?? "", completed: item["completed"]?.boolValue ?? false))
                }
                created += 1
            }
        }
        return edits
    }

    /// Applies an edit as Trello will have it: `newID` is the id Trello gave what `create` or `addItem` made;
    /// `createdIDs` the ids of this plan's checklists made so far.
    public mutating func apply(_ edit: Edit, newID: String? = nil, createdIDs: [String] = []) {
        switch edit {
        case .create(let name):
            if let newID { lists.append(Checklist(id: newID, name: name, items: [])) }
        case .rename(let id, let name):
            if let index = lists.firstIndex(where: { $0.id == id }) { lists[index].name = name }
        case .delete(let id):
            lists.removeAll { $0.id == id }
        case .addItem(let ref, let name, let completed):
            let id: String? =
                switch ref {
                case .id(let id): id
                case .created(let n): n < createdIDs.count ? createdIDs[n] : nil
                }
            if let newID, let index = lists.firstIndex(where: { $0.id == id }) {
                lists[index].items.append(Item(id: newID, name: name, completed: completed))
            }
        case .updateItem(let listID, let itemID, let name, let completed):
            guard let index = lists.firstIndex(where: { $0.id == listID }),
                let item = lists[index].items.firstIndex(where: { $0.id == itemID })
            else { return }
            if let name { lists[index].items[item].name = name }
            if let completed { lists[index].items[item].completed = completed }
        case .deleteItem(let listID, let itemID):
            if let index = lists.firstIndex(where: { $0.id == listID }) { lists[index].items.removeAll { $0.id == itemID } }
        }
    }
}
