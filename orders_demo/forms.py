from django import forms


class PlaceOrderForm(forms.Form):
    product_id = forms.IntegerField(widget=forms.HiddenInput)
    quantity = forms.IntegerField(min_value=1, max_value=1000, initial=1)
