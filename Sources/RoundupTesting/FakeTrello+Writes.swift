import AsyncHTTPClient
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
public import RoundupCore
import RoundupRuntime

// Card writes (REST and a person's edits in Trello's UI), the webhooks Trello sends for them, and rate-limit
// accounting. The writes themselves are `FakeTrello.State` methods run under the lock; each returns the answer's
// body and the webhook deliveries to make, which are sent after the answer is decided, in order, off the request.

extension FakeTrello {
    /// Who made a change, as Trello names its `memberCreator`.
    public struct Member: Sendable, Equatable {
        public var id: String
        public var username: String
        public var fullName: String

        /// The person editing in Trello's UI (`user…` methods).
        public static let user = Member(id: "5c0ffee05c0ffee05c0ffee0", username: "trellouser", fullName: "Trello User")

        /// The member a token belongs to (REST writes); the same for the same token, different between tokens.
        public static func api(token: String) -> Member {
            let digest = SHA256.hash(data: Array(token.utf8))
            let id = digest.prefix(12).map(FakeTrello.hexByte).joined()
            return Member(id: id, username: "api\(id.suffix(6))", fullName: "API \(id.suffix(6))")
        }

        var json: JSONValue {
            .object([
                "id": .string(id), "username": .string(username), "fullName": .string(fullName),
                "initials": .string(String(fullName.split(separator: " ").compactMap(\.first))), "avatarHash": .null,
                "activityBlocked": false, "idMemberReferrer": .null, "nonPublic": .object([:]), "nonPublicAvailable": true,
            ])
        }
    }

    /// A write done: the answer's body and the webhook bodies to send.
    struct Write: Sendable {
        var body: JSONValue
        var deliveries: [Delivery]
    }

    /// One webhook body for one registered webhook, signed when sent.
    struct Delivery: Sendable {
        var webhookID: String
        var callbackURL: String
        var body: [UInt8]
        var secret: String
    }

    /// The attributes `PUT /1/cards/{id}` (and `userUpdateCard`) changes.
    static let updatableAttributes = [
        "name", "desc", "due", "start", "dueComplete", "closed", "idList", "dueReminder", "address", "locationName", "coordinates", "idLabels",
    ]

    // MARK: Public API

    /// Cards created over REST.
    public var cardsCreated: Int { state.withLockedValue { $0.cardsCreated } }

    /// The stored card, as `GET /1/cards/{id}` returns it.
    public func cardValue(_ id: String) -> [String: JSONValue]? { state.withLockedValue { $0.cards[id] } }

    /// The list's cards that are not archived, by id.
    public func openCards(inList listID: String) -> [[String: JSONValue]] {
        state.withLockedValue { state in
            state.cards.values.filter { $0["idList"]?.stringValue == listID && $0["closed"]?.boolValue != true }
        }.sorted { ($0["id"]?.stringValue ?? "") < ($1["id"]?.stringValue ?? "") }
    }

    /// A person adds a card in Trello's UI: stored, and announced (`createCard`) to the webhooks.
    /// Returns its id, or "" when Trello would refuse it (an unknown list: `addList` or `setCard` it first; a bad due).
    @discardableResult
    public func userCreateCard(listID: String, name: String, desc: String = "", due: String? = nil) -> String {
        var params: [String: JSONValue] = ["idList": .string(listID), "name": .string(name), "desc": .string(desc)]
        if let due { params["due"] = .string(due) }
        guard case .success(let write) = perform({ $0.createCard(params, member: .user) }) else { return "" }
        return write.body["id"]?.stringValue ?? ""
    }

    /// A person edits a card: attributes as Trello names them (name, desc, due, start, dueComplete, closed, idList).
    /// One `updateCard` action for all that changed; nothing when nothing did, the card is unknown or a value is invalid.
    public func userUpdateCard(id: String, _ changes: [String: JSONValue]) {
        perform { $0.updateCard(id: id, changes, member: .user) }
    }

    /// A person puts a label on a card, or takes it off (`addLabelToCard`, `removeLabelFromCard`).
    public func userSetLabel(cardID: String, labelID: String, on: Bool) {
        perform { $0.setCardRef(cardID: cardID, attribute: "idLabels", id: labelID, add: on, member: .user) }
    }

    /// A person adds a member to a card, or removes one (`addMemberToCard`, `removeMemberFromCard`).
    public func userSetMember(cardID: String, memberID: String, on: Bool) {
        perform { $0.setCardRef(cardID: cardID, attribute: "idMembers", id: memberID, add: on, member: .user) }
    }

    /// A person deletes a card (`deleteCard`).
    public func userDeleteCard(id: String) {
        perform { $0.deleteCard(id: id, member: .user) }
    }

    /// A person picks a dropdown option (nil: clears it) in a card's custom field (`updateCustomFieldItem`).
    public func userSetPriority(cardID: String, fieldID: String, optionID: String?) {
        perform { $0.setCustomFieldItem(cardID: cardID, fieldID: fieldID, ["idValue": .string(optionID ?? "")], member: .user) }
    }

    /// Waits until every webhook delivery under way is done (polled every 20 ms; gives up after 10 s).
    public func waitForWebhookDeliveries() async {
        let deadline = ContinuousClock.now + .seconds(10)
        while state.withLockedValue({ $0.webhooksInFlight }) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The most requests the token made in any window of this length (a sliding window over `State.arrivals`).
    public func maxRequestsInAnyWindow(token: String, window: Duration = .seconds(10)) -> Int {
        let times = state.withLockedValue { $0.arrivals[token] ?? [] }.sorted()
        var best = 0
        var first = 0
        for last in times.indices {
            while first < last, times[last] - times[first] >= window { first += 1 }
            best = max(best, last - first + 1)
        }
        return best
    }

    // MARK: Writing and announcing

    /// Runs a write under the lock, then queues its webhooks (so they go out once the answer is decided).
    @discardableResult
    func perform(_ write: (inout State) -> Result<Write, Refusal>) -> Result<Write, Refusal> {
        let result = state.withLockedValue { write(&$0) }
        if case .success(let done) = result { enqueue(done.deliveries) }
        return result
    }

    /// The REST answer to a write.
    static func response(_ result: Result<Write, Refusal>) -> SimpleHTTPResponse {
        switch result {
        case .success(let done): return .json(.ok, done.body.canonicalJSON)
        case .failure(let refusal): return refusal.response
        }
    }

    /// Sends one action's bodies in a task of their own, after those of every earlier action.
    func enqueue(_ deliveries: [Delivery]) {
        guard !deliveries.isEmpty else { return }
        let http = self.http
        let state = self.state
        let stopped = self.stopped
        // Counted before the caller gets its answer, so `waitForWebhookDeliveries` right after it waits for these.
        state.withLockedValue { $0.webhooksInFlight += 1 }
        lastDelivery.withLockedValue { last in
            let previous = last
            last = Task {
                _ = await previous?.value
                for delivery in deliveries { await Self.deliver(delivery, http: http, state: state, stopped: stopped) }
                state.withLockedValue { $0.webhooksInFlight -= 1 }
            }
        }
    }

    /// POSTs one body as Trello does (signed `X-Trello-Webhook`), retrying a failure up to 3 times, 100 ms apart.
    /// A 410 answer removes the webhook, as Trello does. Nothing is sent once the fake is stopped.
    static func deliver(_ delivery: Delivery, http: HTTPClient, state: NIOLockedValueBox<State>, stopped: NIOLockedValueBox<Bool>) async {
        let signature = TrelloSignature.sign(secret: delivery.secret, body: delivery.body, callbackURL: delivery.callbackURL)
        for attempt in 0...3 {
            if attempt > 0 { try? await Task.sleep(for: .milliseconds(100)) }
            if stopped.withLockedValue({ $0 }) { return }
            var request = HTTPClientRequest(url: delivery.callbackURL)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "X-Trello-Webhook", value: signature)
            request.body = .bytes(ByteBuffer(bytes: delivery.body))
            guard let response = try? await http.execute(request, timeout: .seconds(5)) else { continue }
            _ = try? await response.body.collect(upTo: 1 << 20)
            let status = response.status.code
            if (200..<300).contains(status) {
                state.withLockedValue { $0.webhooksSent += 1 }
                return
            }
            if status == 410 {
                state.withLockedValue { state in
                    state.webhookFailures += 1
                    state.webhooks.removeValue(forKey: delivery.webhookID)
                }
                return
            }
        }
        state.withLockedValue { $0.webhookFailures += 1 }
    }

    // MARK: Values as Trello keeps them

    static let timestampStyle = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// `2026-11-22T10:00:00.000Z`, Trello's form for dates.
    static func timestamp(_ date: Date = Date()) -> String { timestampStyle.format(date) }

    /// Trello's form of a date a client sent, or nil when it is not one. Trello stores dates normalized to UTC with
    /// milliseconds, so `2026-01-02T03:04:05Z` reads back as `2026-01-02T03:04:05.000Z`.
    static func normalizedDate(_ text: String) -> String? {
        if let date = try? timestampStyle.parse(text) { return timestamp(date) }
        if let date = try? Date.ISO8601FormatStyle().parse(text) { return timestamp(date) }
        // Offsets (`+01:00`) and bare dates.
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime], [.withFullDate]] {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return timestamp(date) }
        }
        return nil
    }

    /// The most characters Trello keeps in a card's name or description.
    public static let maxTextLength = 16_384

    /// The value Trello stores for a card attribute a client sent, or nil when Trello would refuse it.
    /// Query-string values arrive as strings: "true", "null", "1767225600000".
    static func normalized(_ attribute: String, _ value: JSONValue) -> JSONValue? {
        switch attribute {
        case "name", "desc":
            switch value {
            // Trello keeps at most 16,384 characters (a JavaScript string's length: UTF-16 code units) and answers a
            // longer text `400 invalid value for desc` (or `name`), writing nothing of the request.
            case .string(let text): return text.utf16.count <= FakeTrello.maxTextLength ? value : nil
            case .null where attribute == "desc": return .string("")
            default: return nil
            }
        case "due", "start":
            switch value {
            case .null: return .null
            case .string(let text) where text.isEmpty || text == "null": return .null
            case .string(let text):
                if let date = normalizedDate(text) { return .string(date) }
                guard let millis = Double(text) else { return nil }
                return .string(timestamp(Date(timeIntervalSince1970: millis / 1000)))
            case .number(let millis): return .string(timestamp(Date(timeIntervalSince1970: millis / 1000)))
            default: return nil
            }
        case "dueComplete", "closed":
            switch value {
            case .bool: return value
            case .string("true"): return .bool(true)
            case .string("false"): return .bool(false)
            default: return nil
            }
        case "idList":
            guard let id = value.stringValue, !id.isEmpty else { return nil }
            return .string(id)
        case "dueReminder":
            switch value {
            case .null, .string(""), .string("null"): return .null
            case .number(let n) where n == n.rounded(): return .number(n)
            case .string(let text): return Int(text).map { .number(Double($0)) }
            default: return nil
            }
        case "address", "locationName":
            switch value {
            case .null, .string(""): return .null
            case .string: return value
            default: return nil
            }
        case "coordinates":
            // "latitude,longitude", kept as Trello gives it back: an object.
            switch value {
            case .null, .string(""): return .null
            case .string(let text):
                let parts = text.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
                guard parts.count == 2, (-90...90).contains(parts[0]), (-180...180).contains(parts[1]) else { return nil }
                return .object(["latitude": .number(parts[0]), "longitude": .number(parts[1])])
            default: return nil
            }
        case "idLabels":
            switch value {
            case .array(let items): return .array(items.compactMap(\.stringValue).map(JSONValue.string))
            case .string(let text): return .array(text.split(separator: ",").map { .string(String($0)) })
            default: return nil
            }
        default:
            return nil
        }
    }

    static func number(_ value: JSONValue?) -> Double? {
        if case .number(let n)? = value { return n }
        return nil
    }

    static func intValue(_ value: JSONValue) -> Int? {
        switch value {
        case .number(let n): return Int(exactly: n)
        case .string(let text): return Int(text)
        default: return nil
        }
    }

    static func hexByte(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16)
        return digits.count == 1 ? "0" + digits : digits
    }

    static func randomHex(_ count: Int) -> String {
        let digits = Array("0123456789abcdef")
        return String((0..<count).map { _ in digits[Int.random(in: 0..<16)] })
    }

    /// Names for the ids, for action data and webhook models (the fake keeps no names of its own).
    static func listName(_ id: String) -> String { "List \(id)" }
    /// A label of the fake's boards, as Trello gives it on a card and in a label action.
    static func label(_ id: String) -> JSONValue {
        .object(["id": .string(id), "name": .string("label \(id.suffix(4))"), "color": .string("green")])
    }
    static func boardName(_ id: String) -> String { "Board \(id)" }
}

extension FakeTrello.State {
    /// A label as a card carries it: the board's (`FakeTrello.setBoardLabels`), else one made up from its id.
    func label(_ id: String, board: String) -> JSONValue {
        if let known = boardLabels[board]?.first(where: { $0["id"]?.stringValue == id }) {
            return .object(["id": .string(id), "idBoard": .string(board), "name": known["name"] ?? "", "color": known["color"] ?? .null])
        }
        return FakeTrello.label(id)
    }

    /// A fresh 24-hex id; later ids sort after earlier ones.
    /// An id as Trello makes them (MongoDB object ids): the creation time in seconds (8 hex digits), then this fake's
    /// own prefix and a counter, so ids still sort in the order they were made.
    mutating func makeID() -> String {
        let digits = String(nextID, radix: 16)
        nextID += 1
        let seconds = String(UInt32(clamping: Int(Date().timeIntervalSince1970)), radix: 16)
        return String(repeating: "0", count: 8 - seconds.count) + seconds + idPrefix + String(repeating: "0", count: max(0, 8 - digits.count))
            + digits
    }

    /// The board a list is on: from `lists`, or else from a card in it.
    func boardID(ofList listID: String) -> String? {
        if let board = lists[listID] { return board }
        return cards.values.first(where: { $0["idList"]?.stringValue == listID })?["idBoard"]?.stringValue
    }

    /// `POST /1/cards`: idList (required), name, desc, due, start, dueComplete, pos ("top", "bottom" (the default) or a number).
    mutating func createCard(_ params: [String: JSONValue], member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard let listID = params["idList"]?.stringValue, let board = boardID(ofList: listID) else { return .failure(.invalid("idList")) }
        var values: [String: JSONValue] = [:]
        for attribute in ["name", "desc", "due", "start", "dueComplete"] {
            guard let raw = params[attribute] else { continue }
            guard let value = FakeTrello.normalized(attribute, raw) else { return .failure(.invalid(attribute)) }
            values[attribute] = value
        }
        guard let pos = position(params["pos"], inList: listID) else { return .failure(.invalid("pos")) }
        // Labels and members: an array of ids, or Trello's comma-separated text.
        for attribute in ["idLabels", "idMembers"] {
            guard let raw = params[attribute] else { continue }
            let ids: [String]
            switch raw {
            case .array(let items): ids = items.compactMap(\.stringValue)
            case .string(let text): ids = text.split(separator: ",").map(String.init)
            default: return .failure(.invalid(attribute))
            }
            values[attribute] = .array(ids.map(JSONValue.string))
        }
        let idShort = nextID
        let id = makeID()
        var card = FakeTrello.card(id: id, listID: listID, boardID: board, name: "")
        for (attribute, value) in values { card[attribute] = value }
        card["labels"] = .array((card["idLabels"]?.arrayValue ?? []).compactMap(\.stringValue).map { label($0, board: board) })
        card["pos"] = .number(pos)
        card["idShort"] = .number(Double(idShort))
        card["shortLink"] = .string(String(id.suffix(8)))
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[id] = card
        if lists[listID] == nil { lists[listID] = board }
        let deliveries = announce("createCard", card: card, data: ["list": listRef(listID)], lists: [listID], member: member)
        return .success(FakeTrello.Write(body: .object(card), deliveries: deliveries))
    }

    /// `PUT /1/cards/{id}`: any of `FakeTrello.updatableAttributes`. All values are checked before any is applied;
    /// one `updateCard` action names every attribute that changed (none: no action).
    mutating func updateCard(id: String, _ params: [String: JSONValue], member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[id] else { return .failure(.notFound) }
        var values: [(attribute: String, value: JSONValue)] = []
        for attribute in FakeTrello.updatableAttributes {
            guard let raw = params[attribute] else { continue }
            guard let value = FakeTrello.normalized(attribute, raw) else { return .failure(.invalid(attribute)) }
            if attribute == "idList", boardID(ofList: value.stringValue ?? "") == nil { return .failure(.invalid("idList")) }
            values.append((attribute, value))
        }
        let board = card["idBoard"]?.stringValue ?? ""
        if let ids = values.first(where: { $0.attribute == "idLabels" })?.value.arrayValue?.compactMap(\.stringValue), let known = boardLabels[board],
            ids.contains(where: { id in !known.contains { $0["id"]?.stringValue == id } })
        {
            return .failure(.invalid("idLabels"))
        }
        var old: [String: JSONValue] = [:]
        var changed: [String: JSONValue] = [:]
        for (attribute, value) in values where (card[attribute] ?? .null) != value {
            old[attribute] = card[attribute] ?? .null
            changed[attribute] = value
            card[attribute] = value
            // As Trello does, a card carries its labels whole beside their ids.
            if attribute == "idLabels" { card["labels"] = .array((value.arrayValue ?? []).compactMap(\.stringValue).map { label($0, board: board) }) }
        }
        guard !old.isEmpty else { return .success(FakeTrello.Write(body: .object(card), deliveries: [])) }
        let listID = card["idList"]?.stringValue ?? ""
        let listBefore = old["idList"]?.stringValue
        if listBefore != nil, let board = boardID(ofList: listID) { card["idBoard"] = .string(board) }
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[id] = card
        if listBefore != nil, card["idBoard"]?.stringValue != board, let listBefore {
            // To a list of another board: as Trello does, the old board hears `moveCardFromBoard` (naming the list the card
            // left) and the new one `moveCardToBoard` (naming the list it is in), and no `updateCard`.
            var left = card
            left["idBoard"] = .string(board)
            let newBoard = card["idBoard"]?.stringValue ?? ""
            let from = announce(
                "moveCardFromBoard", card: left, data: ["list": listRef(listBefore), "boardTarget": boardRef(newBoard)], lists: [listBefore],
                member: member)
            let to = announce(
                "moveCardToBoard", card: card, data: ["list": listRef(listID), "boardSource": boardRef(board)], lists: [listID], member: member)
            return .success(FakeTrello.Write(body: .object(card), deliveries: from + to))
        }
        var data: [String: JSONValue] = ["old": .object(old)]
        var watched = [listID]
        if let listBefore {
            // A move names both lists (and, like Trello, no `list`); both lists' webhooks hear of it.
            data["listBefore"] = listRef(listBefore)
            data["listAfter"] = listRef(listID)
            watched.append(listBefore)
        } else {
            data["list"] = listRef(listID)
        }
        let deliveries = announce("updateCard", card: card, cardChanges: changed, data: data, lists: watched, member: member)
        return .success(FakeTrello.Write(body: .object(card), deliveries: deliveries))
    }

    /// `DELETE /1/cards/{id}`.
    /// `POST|DELETE /1/cards/{id}/idLabels|idMembers`: a label or member added to the card or taken off it, announced as
    /// `addLabelToCard`, `removeLabelFromCard`, `addMemberToCard` or `removeMemberFromCard` (nothing when nothing changed).
    mutating func setCardRef(
        cardID: String, attribute: String, id: String, add: Bool, member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        var ids = (card[attribute]?.arrayValue ?? []).compactMap(\.stringValue)
        guard ids.contains(id) != add else { return .success(FakeTrello.Write(body: .object(card), deliveries: [])) }
        if add { ids.append(id) } else { ids.removeAll { $0 == id } }
        card[attribute] = .array(ids.map(JSONValue.string))
        if attribute == "idLabels" {
            // As Trello does, a card carries its labels whole beside their ids.
            let board = card["idBoard"]?.stringValue ?? ""
            card["labels"] = .array(ids.map { label($0, board: board) })
        }
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[cardID] = card
        let listID = card["idList"]?.stringValue ?? ""
        let labels = attribute == "idLabels"
        let type = (add ? (labels ? "addLabelToCard" : "addMemberToCard") : (labels ? "removeLabelFromCard" : "removeMemberFromCard"))
        var data: [String: JSONValue] = ["list": listRef(listID)]
        if labels {
            data["label"] = label(id, board: card["idBoard"]?.stringValue ?? "")
        } else {
            data["idMember"] = .string(id)
            data["member"] = .object(["id": .string(id), "name": .string("member \(id.suffix(4))")])
        }
        let deliveries = announce(type, card: card, data: data, lists: [listID], member: member)
        return .success(FakeTrello.Write(body: .object(card), deliveries: deliveries))
    }

    mutating func deleteCard(id: String, member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard let card = cards.removeValue(forKey: id) else { return .failure(.notFound) }
        let listID = card["idList"]?.stringValue ?? ""
        let deliveries = announce("deleteCard", card: card, data: ["list": listRef(listID)], lists: [listID], member: member)
        return .success(FakeTrello.Write(body: .object(["limits": .object([:])]), deliveries: deliveries))
    }

    /// `PUT /1/cards/{id}/customField/{fieldID}/item` with `idValue`: an option of that dropdown field on the card's
    /// board, or "" (or null) to clear it.
    mutating func setCustomFieldItem(
        cardID: String, fieldID: String, _ params: [String: JSONValue], member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        let boardID = card["idBoard"]?.stringValue ?? ""
        guard let field = customFields[boardID]?.first(where: { $0["id"]?.stringValue == fieldID }) else {
            return .failure(.invalidJSON("idCustomField"))
        }
        let optionID: String?
        switch params["idValue"] {
        case .string(let text)?: optionID = text.isEmpty ? nil : text
        case .null?: optionID = nil
        default: return .failure(.invalidJSON("idValue"))
        }
        if let optionID, !(field["options"]?.arrayValue ?? []).contains(where: { $0["id"]?.stringValue == optionID }) {
            return .failure(.invalidJSON("idValue"))
        }
        var items = card["customFieldItems"]?.arrayValue ?? []
        let index = items.firstIndex { $0["idCustomField"]?.stringValue == fieldID }
        let previous = index.flatMap { items[$0]["idValue"]?.stringValue }
        let itemID: String
        if let index, let existing = items[index]["id"]?.stringValue { itemID = existing } else { itemID = makeID() }
        let item = JSONValue.object([
            "id": .string(itemID), "idCustomField": .string(fieldID), "idModel": .string(cardID),
            "idValue": optionID.map(JSONValue.string) ?? .null,
        ])
        guard previous != optionID else { return .success(FakeTrello.Write(body: item, deliveries: [])) }
        switch (index, optionID) {
        case (let index?, _?): items[index] = item
        case (let index?, nil): items.remove(at: index)
        case (nil, _): items.append(item)
        }
        card["customFieldItems"] = .array(items)
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[cardID] = card
        let listID = card["idList"]?.stringValue ?? ""
        var announced = item.objectValue ?? [:]
        announced["modelType"] = "card"
        let deliveries = announce(
            "updateCustomFieldItem", card: card,
            data: [
                "customField": .object(["id": .string(fieldID), "name": field["name"] ?? .null, "type": field["type"] ?? .null]),
                "customFieldItem": .object(announced),
                "old": .object(["idValue": previous.map(JSONValue.string) ?? .null]),
                "list": listRef(listID),
            ], lists: [listID], member: member)
        return .success(FakeTrello.Write(body: item, deliveries: deliveries))
    }

    /// `POST /1/cards/{id}/attachments` with `url` (and `name`, the URL by default): a link attachment.
    mutating func addAttachment(
        cardID: String, _ params: [String: JSONValue], member: FakeTrello.Member
    ) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        guard let url = params["url"]?.stringValue, !url.isEmpty else { return .failure(.invalid("url")) }
        let name = params["name"]?.stringValue ?? url
        let id = makeID()
        // `isUpload` and `mimeType` only from `userAddAttachment` (a file a person uploaded in Trello's UI).
        let upload = params["isUpload"] == .bool(true)
        let attachment = JSONValue.object([
            "id": .string(id), "url": .string(url), "name": .string(name), "isUpload": .bool(upload),
            "mimeType": upload ? params["mimeType"] ?? .null : .null,
        ])
        card["attachments"] = .array((card["attachments"]?.arrayValue ?? []) + [attachment])
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[cardID] = card
        let listID = card["idList"]?.stringValue ?? ""
        let deliveries = announce(
            "addAttachmentToCard", card: card,
            data: [
                "attachment": .object(["id": .string(id), "name": .string(name), "url": .string(url)]), "list": listRef(listID),
            ], lists: [listID], member: member)
        return .success(FakeTrello.Write(body: attachment, deliveries: deliveries))
    }

    /// `DELETE /1/cards/{id}/attachments/{attachmentID}`.
    mutating func deleteAttachment(cardID: String, attachmentID: String, member: FakeTrello.Member) -> Result<FakeTrello.Write, FakeTrello.Refusal> {
        guard var card = cards[cardID] else { return .failure(.notFound) }
        var attachments = card["attachments"]?.arrayValue ?? []
        guard let index = attachments.firstIndex(where: { $0["id"]?.stringValue == attachmentID }) else { return .failure(.notFound) }
        let removed = attachments.remove(at: index)
        card["attachments"] = .array(attachments)
        card["dateLastActivity"] = .string(FakeTrello.timestamp())
        cards[cardID] = card
        let listID = card["idList"]?.stringValue ?? ""
        let deliveries = announce(
            "deleteAttachmentFromCard", card: card,
            data: [
                "attachment": .object(["id": .string(attachmentID), "name": removed["name"] ?? .null]), "list": listRef(listID),
            ], lists: [listID], member: member)
        return .success(FakeTrello.Write(body: .object(["limits": .object([:])]), deliveries: deliveries))
    }

    /// `GET /1/lists/{id}/cards?filter=open|closed|all|none&limit=…&before=…`: newest (highest id) first, so a
    /// client pages with `before=<last id>`.
    func listCards(listID: String, _ params: [String: JSONValue]) -> Result<JSONValue, FakeTrello.Refusal> {
        guard boardID(ofList: listID) != nil else { return .failure(.notFound) }
        let keep: ([String: JSONValue]) -> Bool
        switch params["filter"]?.stringValue ?? "open" {
        case "open": keep = { $0["closed"]?.boolValue != true }
        case "closed": keep = { $0["closed"]?.boolValue == true }
        case "all": keep = { _ in true }
        case "none": keep = { _ in false }
        default: return .failure(.invalid("filter"))
        }
        var limit = 1000
        if let raw = params["limit"] {
            guard let value = FakeTrello.intValue(raw), (0...1000).contains(value) else { return .failure(.invalid("limit")) }
            limit = value
        }
        var found = cards.values.filter { $0["idList"]?.stringValue == listID && keep($0) }
        if let before = params["before"]?.stringValue {
            found = found.filter { ($0["id"]?.stringValue ?? "") < before }
        }
        found.sort { ($0["id"]?.stringValue ?? "") > ($1["id"]?.stringValue ?? "") }
        return .success(.array(found.prefix(limit).map { JSONValue.object($0) }))
    }

    /// Where `pos` puts a new card: "bottom" (the default) after the list's last card, "top" before its first.
    func position(_ value: JSONValue?, inList listID: String) -> Double? {
        let positions = cards.values.filter { $0["idList"]?.stringValue == listID }.compactMap { FakeTrello.number($0["pos"]) }
        switch value {
        case nil, .string("bottom")?: return (positions.max() ?? 0) + 16384
        case .string("top")?: return (positions.min() ?? 32768) / 2
        case .number(let n)? where n >= 0: return n
        case .string(let text)?:
            guard let n = Double(text), n >= 0 else { return nil }
            return n
        default: return nil
        }
    }

    func listRef(_ listID: String) -> JSONValue {
        .object(["id": .string(listID), "name": .string(listName(listID))])
    }

    func boardRef(_ boardID: String) -> JSONValue {
        .object(["id": .string(boardID), "name": .string(FakeTrello.boardName(boardID)), "shortLink": .string(String(boardID.suffix(8)))])
    }

    /// A list webhook's `model` (its `idBoard` is how a receiver tells a list from a board).
    func listModel(_ listID: String) -> JSONValue {
        .object([
            "id": .string(listID), "name": .string(listName(listID)), "closed": .bool(closedLists.contains(listID)),
            "idBoard": .string(boardID(ofList: listID) ?? ""), "pos": .number(65535),
        ])
    }

    func boardModel(_ boardID: String) -> JSONValue {
        let shortLink = String(boardID.suffix(8))
        return .object([
            "id": .string(boardID), "name": .string(FakeTrello.boardName(boardID)), "desc": .string(""), "closed": .bool(false),
            "url": .string("https://trello.com/b/\(shortLink)/board"), "shortUrl": .string("https://trello.com/b/\(shortLink)"),
        ])
    }

    /// Builds a Trello action about `card` and one webhook body for every webhook watching one of `watched` lists or
    /// the card's board, as Trello does: `{"action": {id, idMemberCreator, memberCreator, type, date, data}, "model": …}`.
    /// `data.card` is `{id, name, idShort, shortLink}` plus `cardChanges`; `data.board` is added; `extra` gives the rest.
    mutating func announce(
        _ type: String, card: [String: JSONValue], cardChanges: [String: JSONValue] = [:], data extra: [String: JSONValue],
        lists watched: [String], member: FakeTrello.Member
    ) -> [FakeTrello.Delivery] {
        guard deliverWebhooks else { return [] }
        let boardID = card["idBoard"]?.stringValue ?? ""
        let hooks = webhooks.values.filter { ($0.idModel == boardID || watched.contains($0.idModel)) && !inactiveWebhooks.contains($0.id) }.sorted {
            $0.id < $1.id
        }
        guard !hooks.isEmpty else { return [] }
        let cardID = card["id"]?.stringValue ?? ""
        var cardRef: [String: JSONValue] = [
            "id": .string(cardID), "name": card["name"] ?? .string(""), "idShort": card["idShort"] ?? .number(1),
            "shortLink": card["shortLink"] ?? .string(String(cardID.suffix(8))),
        ]
        for (attribute, value) in cardChanges { cardRef[attribute] = value }
        var data: [String: JSONValue] = ["card": .object(cardRef), "board": boardRef(boardID)]
        for (name, value) in extra { data[name] = value }
        let date = max(Date(), lastActionDate.addingTimeInterval(0.001))
        lastActionDate = date
        let action = JSONValue.object([
            "id": .string(makeID()), "idMemberCreator": .string(member.id), "memberCreator": member.json, "type": .string(type),
            "date": .string(FakeTrello.timestamp(date)), "data": .object(data), "appCreator": .null, "limits": .null,
        ])
        var deliveries: [FakeTrello.Delivery] = []
        for hook in hooks {
            let model = watched.contains(hook.idModel) ? listModel(hook.idModel) : boardModel(boardID)
            let body = Array(JSONValue.object(["action": action, "model": model]).canonicalJSON.utf8)
            deliveries.append(FakeTrello.Delivery(webhookID: hook.id, callbackURL: hook.callbackURL, body: body, secret: webhookSecret))
        }
        return deliveries
    }
}

extension FakeTrello {
    public var webhookSecret: String { state.withLockedValue { $0.webhookSecret } }
    public var webhooksSent: Int { state.withLockedValue { $0.webhooksSent } }
    /// Trello's own limit per token in any 10-second window (nil: none).
    public func setTokenLimit(_ limit: Int?) { state.withLockedValue { $0.tokenLimit = limit } }
    /// Every authorized request takes this long.
    public func setRequestDelay(_ delay: Duration) { state.withLockedValue { $0.requestDelay = delay } }
}

extension FakeTrello {
    /// Gives a board a "Priority" dropdown with these options (option id, text) in this order, replacing any it had.
    public func setPriorityField(boardID: String, fieldID: String, options: [(id: String, text: String)]) {
        let field = JSONValue.object([
            "id": .string(fieldID), "idModel": .string(boardID), "modelType": "board", "name": "Priority", "type": "list",
            "options": .array(
                options.enumerated().map { index, option in
                    .object([
                        "id": .string(option.id), "idCustomField": .string(fieldID), "value": .object(["text": .string(option.text)]),
                        "color": "none", "pos": .number(Double(index + 1) * 16384),
                    ])
                }),
        ])
        state.withLockedValue { $0.customFields[boardID] = [field] }
    }
}

extension FakeTrello {
    /// Trello deactivates a webhook whose callback kept failing: it stays, `active: false`, and delivers nothing.
    public func deactivateWebhook(id: String) { state.withLockedValue { _ = $0.inactiveWebhooks.insert(id) } }
    /// Someone deleted the webhook (in Trello, or its model went away).
    public func removeWebhook(id: String) { state.withLockedValue { _ = $0.webhooks.removeValue(forKey: id) } }
    /// The user revoked the app's token: every request with it is answered 401 "invalid token".
    public func revokeToken(_ token: String) {
        state.withLockedValue { state in
            state.tokens.remove(token)
            if state.token == token { state.token = "revoked-" + token }
        }
    }
    /// The most `GET /1/lists/{id}/cards` requests for one list ever in flight at once.
    public func maxConcurrentListReads(_ listID: String) -> Int { state.withLockedValue { $0.listReadsMax[listID] ?? 0 } }
    /// The requests so far, as they arrived (before any delay), that begin with `prefix` (`"GET /1/cards/ID"`).
    public func requestCount(_ prefix: String) -> Int { state.withLockedValue { $0.requests.filter { $0.hasPrefix(prefix) }.count } }
    public func listReads(_ listID: String) -> Int {
        state.withLockedValue { $0.requests.filter { $0.hasPrefix("GET /1/lists/\(listID)/cards") }.count }
    }
}
