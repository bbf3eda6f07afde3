import Foundation
import RoundupCore
import RoundupStore
import RoundupTrello

/// What writing fields to a card did.
struct WrittenFields {
    /// The stamps to store: each written field's value as the card now holds it (and fields that changed with it).
    var stamps: [String: FieldStamp] = [:]
    /// The card's values of those fields after the writes. Where one differs from what the app sent (a label given by
    /// name, a new check item, a level that picked the nearest option), the apps are sent it.
    var values: [String: JSONValue] = [:]

    mutating func set(_ field: SyncField, _ value: JSONValue, time: Double) {
        values[field] = value
        stamps[field.rawValue] = FieldStamp(hash: value.fieldHash, time: time)
    }
}

/// The card attributes `PUT /cards/{id}` takes for the fields of that name.
private let simpleAttributes: [SyncField: String] = SyncFields.cardAttribute

extension SyncEngine {
    /// Sends field values to a card: plain attributes, location, due reminder and labels in one PUT, then the priority,
    /// the checklists' edits and the links. Everything that can fail the item (an option or label the board lacks, an
    /// upload to delete, a list filter left without its label) is checked before the first write. `marks` are set
    /// first, so the webhook echo of each write is recognised even before the store has the stamps; marks for the states
    /// the card passes through (an item ticked before the next is added) are appended, for the caller to clear once the
    /// stamps are stored.
    func writeFields(
        _ asked: [String: JSONValue], card: [String: JSONValue], list: SyncListRecord, marks: inout [String], state: inout JobState
    ) async throws -> WrittenFields {
        guard !asked.isEmpty, let cardID = card["id"]?.stringValue else { return WrittenFields() }
        var write = asked
        let account = list.accountID
        func mark(_ field: SyncField, _ value: JSONValue) -> String {
            echo.fieldKey(account: account, card: cardID, field: field.rawValue, value: value)
        }
        let priorityField = try await self.priorityField(list, state: &state)
        let current = CardMapper.fields(fromCard: card, priority: priorityField)

        // Checked before anything is written.
        let priority = try await priorityChoice(write, list: list, state: &state)
        var labels: (ids: [String], value: JSONValue)?
        if let value = write[SyncField.labels] { labels = try await labelChoice(value, card: card, list: list, state: &state) }
        var links = try write[SyncField.attachments].map { try linkEdits($0, card: card) }
        if list.settings.moveLinksToNotes {
            moveLinksToNotes(&write, links: &links, current: current, card: card)
            if let notes = write[SyncField.notes], notes != asked[SyncField.notes] { marks.append(mark(SyncField.notes, notes)) }
        }
        // Trello refuses a longer description (400): the item fails here, before any of it is written.
        if case .string(let notes)? = write[SyncField.notes], LinkNotes.length(notes) > LinkNotes.descriptionLimit {
            let moved = write[SyncField.notes] != asked[SyncField.notes] ? " with the links the list moves into it (move_links_to_notes)" : ""
            throw ItemFailure(
                description:
                    "fields.notes: the card's description would be \(LinkNotes.length(notes)) characters\(moved), over Trello's limit of \(LinkNotes.descriptionLimit); nothing of the item was written"
            )
        }

        var written = WrittenFields()
        let now = Date().timeIntervalSince1970
        var attributes: [String: JSONValue] = [:]
        for (name, value) in write {
            if let attribute = SyncField(rawValue: name).flatMap({ simpleAttributes[$0] }) { attributes[attribute] = value }
        }
        if let value = write[SyncField.location] {
            attributes["locationName"] = .string(value["name"]?.stringValue ?? "")
            attributes["address"] = .string(value["address"]?.stringValue ?? "")
            if case .number(let latitude)? = value["latitude"], case .number(let longitude)? = value["longitude"] {
                attributes["coordinates"] = .string("\(latitude),\(longitude)")
            } else {
                attributes["coordinates"] = .string("")
            }
        }
        if let value = write[SyncField.dueReminderMinutes] {
            attributes["dueReminder"] = if case .number(let minutes) = value { .number(minutes) } else { .number(-1) }
        }
        if let labels, labels.ids != (card["idLabels"]?.arrayValue ?? []).compactMap(\.stringValue) {
            attributes["idLabels"] = .string(labels.ids.joined(separator: ","))
            marks.append(mark(SyncField.labels, labels.value))
        }
        if let chosen = priority {
            let text: JSONValue = chosen.option.map { .string($0.text.lowercased()) } ?? .null
            let level: JSONValue = .number(Double(chosen.option.map { chosen.field.level(of: $0.id) } ?? 0))
            marks += [mark(SyncField.priority, text), mark(SyncField.priorityLevel, level)]
        }
        try await echo.mark(marks)

        // The priority first: one request, and the one Trello may still refuse (the board's options edited since they
        // were read), before anything else of the item is written.
        if let chosen = priority {
            try await setPriority(cardID: cardID, chosen: chosen, list: list, state: &state)
            written.set(SyncField.priority, chosen.option.map { .string($0.text.lowercased()) } ?? .null, time: now)
            written.set(SyncField.priorityLevel, .number(Double(chosen.option.map { chosen.field.level(of: $0.id) } ?? 0)), time: now)
        }

        if !attributes.isEmpty {
            guard let updated = try await trello.updateCard(id: cardID, attributes: attributes, credentials: state.credentials) else {
                throw ItemFailure(description: "the card \(cardID) no longer exists in Trello")
            }
            // What Trello holds now, from its reply where it carries the attribute, else as asked.
            let seen = CardMapper.fields(fromCard: updated.merging(card) { new, _ in new }, priority: priorityField)
            for (name, value) in write {
                guard let field = SyncField(rawValue: name),
                    let attribute = simpleAttributes[field] ?? (field == .dueReminderMinutes ? "dueReminder" : nil)
                else { continue }
                let held = updated[attribute] == nil ? nil : CardMapper.partialFields(card: updated, changedAttributes: [attribute])[field]
                written.set(field, held ?? value, time: now)
            }
            if let value = write[SyncField.location] {
                let held = ["locationName", "address", "coordinates"].contains { updated[$0] != nil } ? seen[SyncField.location] ?? value : value
                written.set(SyncField.location, held, time: now)
            }
            if let labels {
                let held = updated["labels"] != nil || updated["idLabels"] != nil ? seen[SyncField.labels] ?? labels.value : labels.value
                written.set(SyncField.labels, held, time: now)
            }
            for field in [SyncField.location, SyncField.labels] where written.values[field] != nil && written.values[field] != write[field] {
                // Trello's form of it differs from the one asked for: its webhook's read of the card gives Trello's.
                let extra = mark(field, written.values[field]!)
                try await echo.mark([extra])
                marks.append(extra)
            }
        } else if let labels {
            written.set(SyncField.labels, labels.value, time: now)  // already the card's labels
        }

        if let wanted = write[SyncField.checklists] {
            let value = try await editChecklists(
                wanted, current: current[SyncField.checklists] ?? .array([]), cardID: cardID, list: list, marks: &marks, state: &state)
            written.set(SyncField.checklists, value, time: now)
        }

        if links != nil || write[SyncField.url] != nil {
            let attachments = try await editLinks(
                links ?? [], url: write[SyncField.url], card: card, list: list, marks: &marks, state: &state)
            written.set(SyncField.attachments, CardMapper.attachments(attachments), time: now)
            written.set(SyncField.url, CardMapper.fields(fromCard: ["attachments": .array(attachments)])[SyncField.url] ?? .null, time: now)
        }
        return written
    }

    /// On a list whose links go into the description (`move_links_to_notes`): the links the app adds (new `attachments`,
    /// a `url` other than the card's first link) are appended to `notes` (the app's, or the card's) instead of becoming
    /// attachments; a `url` that replaces the first link still removes it. The apps are then told the card's notes and
    /// links as they are (the reminder's URL is in its notes now).
    private func moveLinksToNotes(
        _ write: inout [String: JSONValue], links: inout [LinkEdit]?, current: [String: JSONValue], card: [String: JSONValue]
    ) {
        var moved: [LinkNotes.Link] = []
        var kept: [LinkEdit] = []
        for edit in links ?? [] {
            if case .add(let url, let name) = edit { moved.append(LinkNotes.Link(url: url, name: name)) } else { kept.append(edit) }
        }
        if case .string(let url)? = write[SyncField.url] {
            let first = current[SyncField.url]?.stringValue
            if url != first {
                moved.append(LinkNotes.Link(url: url))
                if let first, let attachment = LinkNotes.links(ofCard: card).first(where: { $0.link.url == first }) {
                    kept.append(.delete(id: attachment.id))
                }
            }
            write[SyncField.url] = nil
        }
        if links != nil || !kept.isEmpty { links = kept }
        guard !moved.isEmpty else { return }
        let notes = write[SyncField.notes]?.stringValue ?? current[SyncField.notes]?.stringValue ?? ""
        let appended = LinkNotes.appending(moved, to: notes)
        if appended != notes || write[SyncField.notes] != nil { write[SyncField.notes] = .string(appended) }
    }

    /// Checks what would fail a create's item, before its card is made: an option or label the board lacks, an upload
    /// to delete. Returns the ids of the labels the new card gets: the app's, and on a list that syncs only cards with
    /// some labels, the first of those when the app's have none of them (nil: no labels).
    func checkBeforeCreate(_ fields: [String: JSONValue], list: SyncListRecord, state: inout JobState) async throws -> [String]? {
        _ = try await priorityChoice(fields, list: list, state: &state)
        if let value = fields[SyncField.attachments] { _ = try linkEdits(value, card: [:]) }
        var ids: [String]?
        if let value = fields[SyncField.labels] { ids = try await labelChoice(value, card: [:], list: list, state: &state, keepFilter: false).ids }
        let filter = list.settings.filter.labels
        if let first = filter.sorted().first, filter.isDisjoint(with: ids ?? []) { ids = (ids ?? []) + [first] }
        return ids
    }

    // MARK: Priority

    /// The option to write: by text (`priority`) or level (`priority_level`); nil when neither is written. Fails the
    /// item when the board has no Priority field or no such option (after reading the field again once), or when both
    /// are written and name different options.
    private func priorityChoice(
        _ write: [String: JSONValue], list: SyncListRecord, state: inout JobState
    ) async throws -> (field: PriorityField, option: PriorityField.Option?)? {
        let text = write[SyncField.priority]
        let level = write[SyncField.priorityLevel]
        guard text != nil || level != nil else { return nil }
        for refresh in [false, true] {
            guard let field = try await priorityField(list, state: &state, refresh: refresh) else {
                // Nothing to clear on a board without the field.
                if [nil, .null, .string("none")].contains(text), level.map({ $0 == .number(0) }) ?? true { return nil }
                if refresh {
                    let which = text != nil && text != .null ? "priority \(text!)" : "priority_level \(level!)"
                    throw ItemFailure(
                        description:
                            "fields.\(text != nil ? SyncField.priority : SyncField.priorityLevel): the board has no Priority dropdown field for \(which)"
                    )
                }
                continue
            }
            // Each given names an option, or none (nil clears the field).
            var byText: PriorityField.Option? = text == .null ? field.option(level: 0) : nil
            if case .string(let wanted)? = text {
                byText = field.option(text: wanted)
                if byText == nil, wanted != "none" {
                    if !refresh { continue }
                    let options = field.ordered.map { $0.text.lowercased() }.joined(separator: ", ")
                    throw ItemFailure(description: "fields.priority: \"\(wanted)\" is not an option of the board's Priority field (\(options))")
                }
            }
            var byLevel: PriorityField.Option?
            if case .number(let wanted)? = level { byLevel = field.option(level: Int(wanted)) }
            // Both sent as the server reported them name the same option, or (more than nine options share levels)
            // one of the same level: the text decides.
            var sameLevel = false
            if case .number(let wanted)? = level { sameLevel = (byText.map { field.level(of: $0.id) } ?? 0) == Int(wanted) }
            if text != nil, level != nil, byText?.id != byLevel?.id, !sameLevel {
                func name(_ option: PriorityField.Option?) -> String { option.map { "\"\($0.text.lowercased())\"" } ?? "none" }
                throw ItemFailure(
                    description:
                        "fields.priority_level: \(level!.canonicalJSON) names \(name(byLevel)) but fields.priority names \(name(byText)): send one, or both naming the same option"
                )
            }
            return (field, text != nil ? byText : byLevel)
        }
        return nil
    }

    private func setPriority(
        cardID: String, chosen: (field: PriorityField, option: PriorityField.Option?), list: SyncListRecord, state: inout JobState
    ) async throws {
        do {
            try await trello.setCustomFieldOption(
                cardID: cardID, fieldID: chosen.field.fieldID, optionID: chosen.option?.id, credentials: state.credentials)
        } catch let error as TrelloError where error.status == 400 {
            // The option ids we keep are out of date (the board's field was edited): read them again once, same text.
            guard let field = try await priorityField(list, state: &state, refresh: true) else { throw error }
            let option = chosen.option.flatMap { field.option(text: $0.text) }
            guard chosen.option == nil || option != nil else {
                throw ItemFailure(description: "fields.priority: the board's Priority field no longer has \"\(chosen.option!.text.lowercased())\"")
            }
            try await trello.setCustomFieldOption(cardID: cardID, fieldID: field.fieldID, optionID: option?.id, credentials: state.credentials)
        }
    }

    // MARK: Labels

    /// The labels an app's value names, in its order: ids, and the value the apps see.
    private func labelChoice(
        _ value: JSONValue, card: [String: JSONValue], list: SyncListRecord, state: inout JobState, keepFilter: Bool = true
    ) async throws -> (ids: [String], value: JSONValue) {
        let entries = value.arrayValue ?? []
        var known = (card["labels"]?.arrayValue ?? []).compactMap(\.objectValue)
        func find(_ entry: JSONValue, in labels: [[String: JSONValue]]) -> [String: JSONValue]? {
            let id = entry["id"]?.stringValue ?? entry.stringValue
            if let id, let label = labels.first(where: { $0["id"]?.stringValue == id }) { return label }
            guard let name = (entry["name"]?.stringValue ?? entry.stringValue)?.lowercased() else { return nil }
            // By name; a label without one by its colour.
            return labels.first { ($0["name"]?.stringValue ?? "").lowercased() == name }
                ?? labels.first { ($0["name"]?.stringValue ?? "").isEmpty && $0["color"]?.stringValue?.lowercased() == name }
        }
        if entries.contains(where: { find($0, in: known) == nil }) {
            // Not all on the card: the board's labels (read once a job).
            known = try await boardLabels(list, state: &state)
        }
        var ids: [String] = []
        var labels: [JSONValue] = []
        for (index, entry) in entries.enumerated() {
            // A label given by id that the board no longer has was deleted in Trello: it stays deleted.
            if find(entry, in: known) == nil, let id = entry["id"]?.stringValue ?? entry.stringValue, entry["name"]?.stringValue == nil,
                id.utf8.count == 24, id.allSatisfy(\.isHexDigit)
            {
                continue
            }
            guard let label = find(entry, in: known), let id = label["id"]?.stringValue else {
                let names = known.compactMap { ($0["name"]?.stringValue).flatMap { $0.isEmpty ? nil : $0 } }.sorted().joined(separator: ", ")
                throw ItemFailure(description: "fields.labels[\(index)]: the board has no label \(entry.canonicalJSON) (its labels: \(names))")
            }
            guard !ids.contains(id) else { continue }
            ids.append(id)
            labels.append(.object(["id": .string(id), "name": label["name"] ?? .null, "color": label["color"] ?? .null]))
        }
        let filter = list.settings.filter.labels
        if keepFilter, !filter.isEmpty, filter.isDisjoint(with: ids) {
            throw ItemFailure(
                description:
                    "fields.labels: the list syncs only cards with one of the labels \(filter.sorted().joined(separator: ", ")); without one the card would leave it"
            )
        }
        return (ids, .array(labels))
    }

    /// The board's labels, read from Trello once a job.
    private func boardLabels(_ list: SyncListRecord, state: inout JobState) async throws -> [[String: JSONValue]] {
        if let known = state.labels[list.trelloBoardID] { return known }
        let labels = try await trello.boardLabels(boardID: list.trelloBoardID, credentials: state.credentials)
        state.labels[list.trelloBoardID] = labels
        return labels
    }

    // MARK: Checklists

    private func editChecklists(
        _ wanted: JSONValue, current: JSONValue, cardID: String, list: SyncListRecord, marks: inout [String], state: inout JobState
    ) async throws -> JSONValue {
        var checklists = Checklists(current)
        var created: [String] = []
        state.begun.insert("\(state.item)|\(SyncField.checklists)")
        var ordinal = 0
        for edit in checklists.edits(to: wanted) {
            var newID: String?
            // What an earlier attempt of this item made is not made again (a retry after a timeout, say): the plan is the
            // same (the app's value is), so the n-th thing made is the same thing.
            let step = "\(state.item)|\(SyncField.checklists)|\(ordinal)"
            switch edit {
            case .create(let name):
                ordinal += 1
                if let known = state.made[step] {
                    newID = known
                } else {
                    let made = try await trello.createChecklist(cardID: cardID, name: name, credentials: state.credentials)
                    newID = made["id"]?.stringValue
                    state.made[step] = newID
                }
                if let newID { created.append(newID) }
            case .addItem(let ref, let name, let completed):
                ordinal += 1
                let checklistID: String? =
                    switch ref {
                    case .id(let id): id
                    case .created(let n): n < created.count ? created[n] : nil
                    }
                guard let checklistID else { continue }
                if let known = state.made[step] {
                    newID = known
                    if checklists.lists.contains(where: { $0.items.contains { $0.id == known } }) { continue }  // already in the card read
                } else {
                    let item = try await trello.addCheckItem(checklistID: checklistID, name: name, checked: completed, credentials: state.credentials)
                    newID = item["id"]?.stringValue
                    state.made[step] = newID
                }
            default:
                // Known before it is made: fingerprinted first.
                var after = checklists
                after.apply(edit)
                // Not cleared with the final values' marks: a read of the card taken mid-write may be checked after the
                // write is stored, so the states it passes through expire on their own (`ROUNDUP_ECHO_TTL_SECONDS`).
                try await echo.mark([mark(account: list.accountID, cardID: cardID, SyncField.checklists, after.value)])
                switch edit {
                case .rename(let id, let name): try await trello.renameChecklist(id: id, name: name, credentials: state.credentials)
                case .delete(let id): try await trello.deleteChecklist(id: id, credentials: state.credentials)
                case .updateItem(_, let itemID, let name, let completed):
                    _ = try await trello.updateCheckItem(
                        cardID: cardID, itemID: itemID, name: name, completed: completed, credentials: state.credentials)
                case .deleteItem(_, let itemID): try await trello.deleteCheckItem(cardID: cardID, itemID: itemID, credentials: state.credentials)
                case .create, .addItem: break
                }
            }
            if case .create = edit, let newID, checklists.lists.contains(where: { $0.id == newID }) { continue }  // already in the card read
            checklists.apply(edit, newID: newID, createdIDs: created)
            if newID != nil {
                // Made: fingerprinted as soon as Trello gives its id (left to expire, as above).
                try await echo.mark([mark(account: list.accountID, cardID: cardID, SyncField.checklists, checklists.value)])
            }
        }
        let final = mark(account: list.accountID, cardID: cardID, SyncField.checklists, checklists.value)
        try await echo.mark([final])
        marks.append(final)
        return checklists.value
    }

    // MARK: Links

    /// A link edit: add `url` (named `name`), or delete the attachment `id`.
    enum LinkEdit {
        case add(url: String, name: String?)
        case delete(id: String)
    }

    /// The edits an app's `attachments` asks for; deleting an uploaded file fails the item.
    private func linkEdits(_ value: JSONValue, card: [String: JSONValue]) throws -> [LinkEdit] {
        let attachments = card["attachments"]?.arrayValue ?? []
        var edits: [LinkEdit] = []
        for (index, entry) in (value.arrayValue ?? []).enumerated() {
            if entry["deleted"]?.boolValue == true, let id = entry["id"]?.stringValue {
                guard let attachment = attachments.first(where: { $0["id"]?.stringValue == id }) else { continue }  // gone already
                if attachment["isUpload"]?.boolValue == true {
                    throw ItemFailure(description: "fields.attachments[\(index)]: \(id) is an uploaded file; the apps delete links only")
                }
                edits.append(.delete(id: id))
            } else if entry["id"]?.stringValue == nil, let url = entry["url"]?.stringValue {
                edits.append(.add(url: url, name: entry["name"]?.stringValue))
            }
        }
        return edits
    }

    /// Applies link edits, then `url` (the first link replaced, added or, with null, removed); returns the card's
    /// attachments after. Each state the attachments pass through is fingerprinted before it exists (or, for a new
    /// attachment whose id Trello gives, as soon as it does), so their webhooks, and the card reads they cause, are
    /// known for our own writes.
    private func editLinks(
        _ edits: [LinkEdit], url: JSONValue?, card: [String: JSONValue], list: SyncListRecord, marks: inout [String], state: inout JobState
    ) async throws -> [JSONValue] {
        guard let cardID = card["id"]?.stringValue else { return [] }
        var attachments = card["attachments"]?.arrayValue ?? []
        var steps = edits
        if let url {
            let link = CardMapper.fields(fromCard: ["attachments": .array(attachments)])[SyncField.url]?.stringValue
            let changed = url.stringValue != link
            if changed, let link, let first = attachments.first(where: { $0["isUpload"]?.boolValue != true && $0["url"]?.stringValue == link }),
                let id = first["id"]?.stringValue
            {
                steps.append(.delete(id: id))
            }
            if changed, case .string(let text) = url { steps.append(.add(url: text, name: nil)) }
        }
        /// The attachments and the first link they give, fingerprinted (each state a write passes through is left to
        /// expire on its own: a card read taken mid-write may be checked after the write is stored).
        func fingerprint(_ attachments: [JSONValue]) async throws {
            try await echo.mark([
                mark(account: list.accountID, cardID: cardID, SyncField.attachments, CardMapper.attachments(attachments)),
                mark(
                    account: list.accountID, cardID: cardID, SyncField.url,
                    CardMapper.fields(fromCard: ["attachments": .array(attachments)])[SyncField.url] ?? .null),
            ])
        }
        state.begun.insert("\(state.item)|\(SyncField.attachments)")
        state.begun.insert("\(state.item)|\(SyncField.url)")
        var ordinal = 0
        for step in steps {
            switch step {
            case .delete(let id):
                guard let index = attachments.firstIndex(where: { $0["id"]?.stringValue == id }) else { continue }
                attachments.remove(at: index)
                try await fingerprint(attachments)
                try await trello.deleteAttachment(cardID: cardID, attachmentID: id, credentials: state.credentials)
            case .add(let url, let name):
                // A link an earlier attempt of this item added is not added again.
                let key = "\(state.item)|\(SyncField.attachments)|\(ordinal)"
                ordinal += 1
                if let known = state.made[key], attachments.contains(where: { $0["id"]?.stringValue == known }) { continue }
                let added = try await trello.addURLAttachment(cardID: cardID, url: url, name: name, credentials: state.credentials)
                state.made[key] = added["id"]?.stringValue
                attachments.append(.object(added))
                try await fingerprint(attachments)
            }
        }
        let finals = [
            mark(account: list.accountID, cardID: cardID, SyncField.attachments, CardMapper.attachments(attachments)),
            mark(
                account: list.accountID, cardID: cardID, SyncField.url,
                CardMapper.fields(fromCard: ["attachments": .array(attachments)])[SyncField.url] ?? .null),
        ]
        try await echo.mark(finals)
        marks += finals
        return attachments
    }

    private func mark(account: String, cardID: String, _ field: SyncField, _ value: JSONValue) -> String {
        echo.fieldKey(account: account, card: cardID, field: field.rawValue, value: value)
    }
}
