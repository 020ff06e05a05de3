package node

import (
	"fmt"
	"net/http"

	"github.com/gpunex/gpunex/node/api"
	"github.com/gpunex/gpunex/protocol"
)

// Model catalogue routes of the local API (docs/api.md).

func (a *APIServer) modelRoutes() []apiRoute {
	return []apiRoute{
		{pattern: "GET /v1/models", answer: a.listModels},
		{pattern: "POST /v1/coordinator/models", answer: a.editModels},
	}
}

func (a *APIServer) listModels(r *http.Request) (any, error) { return a.modelsView(), nil }

// modelsView is the catalogue this node names and scores GPUs with: a coordinator's own,
// else that of the first coordinator it trusts.
func (a *APIServer) modelsView() api.ModelsView {
	var c *protocol.ModelCatalogue
	if a.n.coord != nil {
		c = a.n.models.Current(a.n.peer.ID)
	} else if trusted, err := a.n.cfg.TrustedCoordinators(); err == nil && len(trusted) > 0 {
		c = a.n.models.Current(trusted[0])
	} else {
		c = protocol.FirstModels()
	}
	return api.ModelsView{Coordinator: c.Coordinator, Seq: c.Seq, IssuedAt: c.IssuedAt, Models: c.Models}
}

func (a *APIServer) editModels(r *http.Request) (any, error) {
	if err := a.needCoordinator(); err != nil {
		return nil, err
	}
	var e api.ModelEdit
	if err := decodeBody(r, protocol.MaxModelCatalogueSize, &e); err != nil {
		return nil, err
	}
	e.Entry.Model = protocol.NormalizeModel(e.Entry.Model)
	_, err := a.n.models.Edit(r.Context(), func(models []protocol.ModelEntry) ([]protocol.ModelEntry, error) {
		at := -1
		for i, m := range models {
			if m.Model == e.Entry.Model {
				at = i
			}
		}
		switch {
		case e.Op == "add" && at >= 0:
			return nil, api.Conflict(fmt.Errorf("model %s is in the catalogue already: change it with set", e.Entry.Model))
		case e.Op == "add":
			return append(models, e.Entry), nil
		case (e.Op == "set" || e.Op == "remove") && at < 0:
			return nil, fmt.Errorf("%w: model %s is not in the catalogue: add it first", api.ErrNotFound, e.Entry.Model)
		case e.Op == "set":
			models[at] = e.Entry
			return models, nil
		case e.Op == "remove":
			return append(models[:at], models[at+1:]...), nil
		}
		return nil, api.Invalid(fmt.Errorf("op %q: expected add, set or remove", e.Op))
	})
	if err != nil {
		if r := protocol.Reason(err); api.HTTPStatus(err) == http.StatusInternalServerError && (r == "invalid" || r == "too_large") {
			err = api.Invalid(err)
		}
		return nil, err
	}
	return a.modelsView(), nil
}
