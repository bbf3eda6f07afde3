import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupTrello

/// `POST /dailyroundup/lists` asks Trello for the list (`GET /1/lists/{id}?fields=idBoard,name,closed`) before it makes
/// anything: a list on another board than the one named with it, one Trello does not have, or one
/// archived is refused with 422, and nothing is stored, registered at Trello or routed.
@Suite struct PairingTests {
    static let bootstrap = "bootstrap-0123456789abcdef"

    /// An account with its Trello credentials set; its token.
    func account(_ api: InProcessAPI) async throws -> (account: String, token: String) {
        let created = try await api.call(.POST, "/dailyroundup/account", token: Self.bootstrap)
        #expect(created.status == .created, "\(created.body)")
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let credentials = #"{"trello_api_key":"test-api-key","trello_token":"test-token","trello_webhook_secret":"whsec-0123456789"}"#
        #expect(try await api.call(.PUT, "/dailyroundup/account", token: token, body: credentials).status == .ok)
        return (account, token)
    }

    func pair(_ api: InProcessAPI, token: String, board: String, list: String) async throws -> InProcessAPI.Response {
        let body = JSONValue.object(["name": "Errands", "trello_board_id": .string(board), "trello_list_id": .string(list)]).canonicalJSON
        return try await api.call(.POST, "/dailyroundup/lists", token: token, body: body)
    }

    @Test func aListPairedWithABoardItIsNotOnIsRefusedAndNothingIsMade() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            let (account, token) = try await account(api)
            api.trello.addList(id: "Lmine", boardID: "Bother")
            api.trello.addList(id: "Larchived", boardID: "Bmine")
            api.trello.setListClosed("Larchived")

            let wrongBoard = try await pair(api, token: token, board: "Bmine", list: "Lmine")
            #expect(wrongBoard.status == .unprocessableEntity, "\(wrongBoard.body)")
            #expect(wrongBoard.json["error"]?["code"] == "unprocessable")
            let message = wrongBoard.json["error"]?["message"]?.stringValue ?? ""
            #expect(message.contains("Bother") && message.contains("trello_board_id"), "\(message)")

            let unknown = try await pair(api, token: token, board: "Bmine", list: "Lnowhere")
            #expect(unknown.status == .unprocessableEntity, "\(unknown.body)")
            #expect(unknown.json["error"]?["message"]?.stringValue?.contains("Lnowhere") == true, "\(unknown.body)")

            let archived = try await pair(api, token: token, board: "Bmine", list: "Larchived")
            #expect(archived.status == .unprocessableEntity, "\(archived.body)")
            #expect(archived.json["error"]?["message"]?.stringValue?.contains("archived") == true, "\(archived.body)")

            // Trello was asked about each list, with the fields the check reads, and nothing was made: no webhook, no
            // list stored, no route for the ingress.
            let requests = api.trello.state.withLockedValue { $0.requests }
            #expect(requests.filter { $0.hasPrefix("GET /1/lists/") } == ["GET /1/lists/Lmine", "GET /1/lists/Lnowhere", "GET /1/lists/Larchived"])
            #expect(api.trello.writeRequests.isEmpty, "\(api.trello.writeRequests)")
            #expect(api.trello.webhooks.isEmpty)
            #expect(try await api.store.syncLists(accountID: account).isEmpty)
            for model in ["Lmine", "Bmine", "Bother", "Lnowhere", "Larchived"] {
                #expect(try await api.redis.send("EXISTS", RedisArgument(api.keys.modelRoute(model))).int == 0)
            }

            // The list with its own board passes the check and goes on to its webhooks (which fail here: this API has
            // no ingress for Trello's HEAD check, so 502, and still nothing is kept).
            let right = try await pair(api, token: token, board: "Bother", list: "Lmine")
            #expect(right.status == .badGateway, "\(right.body)")
            #expect(api.trello.writeRequests.contains("POST /1/webhooks"), "\(api.trello.writeRequests)")
            #expect(try await api.store.syncLists(accountID: account).isEmpty)
        }
    }

    /// `TrelloClient.list` against the fake, which answers `GET /1/lists/{id}` as Trello does: the fields asked for and
    /// the id (every field without `fields`), 404 for a list it does not know (nil), 400 for a field Trello has not.
    @Test func theClientReadsAListFromTheFakeTrello() async throws {
        let trello = try await FakeTrello.start()
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        let client = TrelloClient(baseURL: trello.baseURL, http: http, logger: Logger(label: "test"))
        let credentials = TrelloCredentials(apiKey: "test-api-key", token: "test-token")
        trello.addList(id: "L1", boardID: "B1")
        #expect(try await client.list(id: "L1", credentials: credentials) == .init(id: "L1", boardID: "B1", name: "List L1", closed: false))
        trello.setListClosed("L1")
        #expect(try await client.list(id: "L1", credentials: credentials)?.closed == true)
        #expect(try await client.list(id: "L2", credentials: credentials) == nil)
        // What the fake answered, as sent: only the fields asked for, and the id.
        let some = try await client.get("/lists/L1?fields=idBoard,name,closed", credentials: credentials, notFoundIsNil: false)
        #expect(some == .object(["id": "L1", "idBoard": "B1", "name": "List L1", "closed": true]))
        let all = try await client.get("/lists/L1", credentials: credentials, notFoundIsNil: false)
        #expect(all?["pos"] != nil && all?["idBoard"] == "B1")
        await #expect {
            _ = try await client.get("/lists/L1?fields=idBoard,nonsense", credentials: credentials, notFoundIsNil: false)
        } throws: { error in
            (error as? TrelloError)?.status == 400
        }
        try await http.shutdown()
        await trello.stop()
    }
}
