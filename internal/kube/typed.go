package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// object is a Kubernetes object of one kind.
type object interface {
	runtime.Object
	metav1.Object
}

// typed is client-gen's typed client of one resource (client-go's gentype,
// whose requests it makes the same way), written out: gentype also carries
// client-go's apply and fake support, which link managed fields, OpenAPI
// and protobuf-go into the binary (about 13 MB; clientset_footprint_test).
// Every request prefers protobuf: the built-in types all speak it.
type typed[T object, L runtime.Object] struct {
	rc                  rest.Interface
	resource, namespace string
	newObject           func() T
	newList             func() L
}

func (c *typed[T, L]) request(r *rest.Request) *rest.Request {
	return r.UseProtobufAsDefaultIfPreferred(true).NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.resource)
}

func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

func (c *typed[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.rc.Get()).Name(name).VersionedParams(&opts, ParameterCodec).Do(ctx).Into(result)
	return result, err
}

func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	list := c.newList()
	err := c.request(c.rc.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeoutOf(opts)).Do(ctx).Into(list)
	return list, err
}

func (c *typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request(c.rc.Get()).VersionedParams(&opts, ParameterCodec).Timeout(timeoutOf(opts)).Watch(ctx)
}

func (c *typed[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.rc.Post()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (c *typed[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.rc.Put()).Name(obj.GetName()).VersionedParams(&opts, ParameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (c *typed[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.request(c.rc.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

func (c *typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	result := c.newObject()
	err := c.request(c.rc.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, ParameterCodec).Body(data).Do(ctx).Into(result)
	return result, err
}
