package main

// Reconciles one Widget: computes its status from its spec and writes it
// through the status subresource, inside a reconcile span whose children are
// the client's request spans (otelhttp on client-go's transport).

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// The controller's name, as controller-runtime names it in logs and metrics,
// and as the reconcile span's `controller` attribute.
const controllerName = "widget"

type statusVerb string

const (
	// Status().Update(): a PUT of the whole object to …/status, carrying its resourceVersion.
	statusUpdate statusVerb = "update"
	// Status().Patch() with client.MergeFrom: a merge PATCH of the changed status fields.
	statusPatch statusVerb = "patch"
)

type WidgetReconciler struct {
	client.Client
	Tracer trace.Tracer
	Verb   statusVerb
	// Swallow logs a failed status write and reports success: the bug lostwrite exists to catch.
	Swallow bool
}

func (r *WidgetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&Widget{}).Named(controllerName).Complete(r)
}

func (r *WidgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var widget Widget
	if err := r.Get(ctx, req.NamespacedName, &widget); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The attribute names lostwrite reads (docs/spans.md), as the other testbed operators send them.
	ctx, span := r.Tracer.Start(ctx, "reconcile Widget", trace.WithAttributes(
		attribute.String("controller", controllerName),
		attribute.String("controllerKind", "Widget"),
		attribute.String("namespace", widget.Namespace),
		attribute.String("name", widget.Name),
		attribute.Int64("generation", widget.Generation),
	))
	defer span.End()

	desired := desiredStatus(&widget)
	if upToDate(&widget, desired) {
		return ctrl.Result{}, nil
	}
	err := r.writeStatus(ctx, &widget, desired)
	if err == nil {
		log.Info("status written", "generation", widget.Generation, "verb", r.Verb)
		return ctrl.Result{}, nil
	}
	if r.Swallow {
		// The bug on purpose: logged, and the reconcile (and its span) reports success.
		log.Error(err, "status write failed, ignoring", "generation", widget.Generation, "verb", r.Verb)
		return ctrl.Result{}, nil
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	return ctrl.Result{}, err
}

func (r *WidgetReconciler) writeStatus(ctx context.Context, widget *Widget, desired WidgetStatus) error {
	switch r.Verb {
	case statusPatch:
		base := widget.DeepCopy()
		widget.Status = desired
		return r.Status().Patch(ctx, widget, client.MergeFrom(base))
	default:
		widget.Status = desired
		return r.Status().Update(ctx, widget)
	}
}

// desiredStatus: Ready unless spec.paused, with a Ready condition whose
// transition time moves only when its status changes.
func desiredStatus(widget *Widget) WidgetStatus {
	status := *widget.Status.DeepCopy()
	status.ObservedGeneration = widget.Generation
	condition := metav1.Condition{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled",
		Message: fmt.Sprintf("generation %d reconciled", widget.Generation), ObservedGeneration: widget.Generation,
	}
	status.Phase = "Ready"
	if widget.Spec.Paused {
		status.Phase = "Paused"
		condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, "Paused", "spec.paused is true"
	}
	meta.SetStatusCondition(&status.Conditions, condition)
	return status
}

func upToDate(widget *Widget, desired WidgetStatus) bool {
	return widget.Status.ObservedGeneration == desired.ObservedGeneration && widget.Status.Phase == desired.Phase
}
